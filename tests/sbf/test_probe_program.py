"""Each feature of the C -> SBF toolchain, run in Agave's runtime (LiteSVM) and checked by its effect."""

from __future__ import annotations

import base64
import hashlib
import struct

import pytest
from solders.clock import Clock
from solders.instruction import AccountMeta, Instruction
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.system_program import ID as SYSTEM_PROGRAM
from solders.system_program import CreateAccountParams, create_account
from solders.transaction import TransactionError
from solders.transaction_metadata import TransactionMetadata

LOG, WRITE, CREATE_PDA, CLOCK, SHA256, FAIL, MATH, SHUFFLE = range(8)


def ix(
    program_id: Pubkey, tag: int, payload: bytes = b"", accounts: list[AccountMeta] | None = None
):
    return Instruction(program_id, bytes([tag]) + payload, accounts or [])


def custom_code(err: TransactionError) -> int | None:
    """The n of InstructionError(_, Custom(n)), or None for other errors."""
    text = str(err)
    if "Custom(" not in text:
        return None
    return int(text.split("Custom(")[1].split(")")[0])


def program_account(chain, owner: Pubkey, space: int) -> Keypair:
    """A fresh account of `space` bytes owned by `owner`, created by the client."""
    account = Keypair()
    lamports = chain.svm.minimum_balance_for_rent_exemption(space)
    chain.ok(
        [
            create_account(
                CreateAccountParams(
                    from_pubkey=chain.payer.pubkey(),
                    to_pubkey=account.pubkey(),
                    lamports=lamports,
                    space=space,
                    owner=owner,
                )
            )
        ],
        [account],
    )
    return account


def test_logs(chain, probe_id):
    result = chain.ok([ix(probe_id, LOG, b"xy")])
    logs = result.logs()
    assert "Program log: probe: hello from C" in logs
    assert "Program log: 0x1, 0x2, 0x3, 0x4, 0x5" in logs
    assert f"Program log: {probe_id}" in logs
    assert any(line.startswith("Program consumption: ") for line in logs)
    data_line = next(line for line in logs if line.startswith("Program data: "))
    fields = [base64.b64decode(f) for f in data_line.removeprefix("Program data: ").split()]
    assert fields == [b"probe", b"xy"]


def test_write_program_owned_account(chain, probe_id):
    account = program_account(chain, probe_id, 64)
    meta = [AccountMeta(account.pubkey(), False, True)]
    chain.ok([ix(probe_id, WRITE, b"hello", meta)])
    chain.ok([ix(probe_id, WRITE, b"world!", meta)])
    data = bytes(chain.svm.get_account(account.pubkey()).data)
    assert struct.unpack_from("<Q", data)[0] == 2
    assert data[8:14] == b"world!"
    assert data[14:] == bytes(50)


def test_write_refuses_foreign_account(chain, probe_id):
    foreign = program_account(chain, Keypair().pubkey(), 64)
    err = chain.fails([ix(probe_id, WRITE, b"x", [AccountMeta(foreign.pubkey(), False, True)])])
    assert custom_code(err) == 6000


def test_create_pda_through_cpi(chain, probe_id):
    payer = chain.payer.pubkey()
    vault, bump = Pubkey.find_program_address([b"vault", bytes(payer)], probe_id)
    accounts = [
        AccountMeta(payer, True, True),
        AccountMeta(vault, False, True),
        AccountMeta(SYSTEM_PROGRAM, False, False),
    ]
    chain.ok([ix(probe_id, CREATE_PDA, struct.pack("<Q", 96), accounts)])
    account = chain.svm.get_account(vault)
    assert account.owner == probe_id
    assert len(account.data) == 96
    assert account.lamports == chain.svm.minimum_balance_for_rent_exemption(96)
    assert bytes(account.data[:9]) == struct.pack("<QB", 0x7661756C74, bump)
    # the address is taken now: the system program refuses a second create (AccountAlreadyInUse = 0)
    assert (
        custom_code(chain.fails([ix(probe_id, CREATE_PDA, struct.pack("<Q", 96), accounts)])) == 0
    )


def test_create_pda_rejects_wrong_address(chain, probe_id):
    accounts = [
        AccountMeta(chain.payer.pubkey(), True, True),
        AccountMeta(Keypair().pubkey(), False, True),
        AccountMeta(SYSTEM_PROGRAM, False, False),
    ]
    err = chain.fails([ix(probe_id, CREATE_PDA, struct.pack("<Q", 96), accounts)])
    assert "InvalidSeeds" in str(err)


def test_clock_sysvar(chain, probe_id):
    account = program_account(chain, probe_id, 24)
    chain.svm.warp_to_slot(12_345)
    chain.svm.set_clock(Clock(12_345, 1_700_000_000, 7, 8, 1_767_225_600))
    chain.ok([ix(probe_id, CLOCK, b"", [AccountMeta(account.pubkey(), False, True)])])
    slot, unix_timestamp, epoch = struct.unpack(
        "<QqQ", bytes(chain.svm.get_account(account.pubkey()).data)
    )
    assert (slot, unix_timestamp, epoch) == (12_345, 1_767_225_600, 7)


@pytest.mark.parametrize("message", [b"", b"a", b"cohort" * 37])
def test_sha256_syscall_matches_hashlib(chain, probe_id, message):
    result = chain.ok([ix(probe_id, SHA256, message)])
    assert bytes(result.return_data().data) == hashlib.sha256(message).digest()


@pytest.mark.parametrize("code", [1, 6001, 0xFFFF_FFFF])
def test_custom_error(chain, probe_id, code):
    err = chain.fails([ix(probe_id, FAIL, struct.pack("<I", code))])
    assert custom_code(err) == code


def test_custom_error_zero_and_builtin(chain, probe_id):
    assert custom_code(chain.fails([ix(probe_id, FAIL, struct.pack("<I", 0))])) == 0
    assert "InvalidInstructionData" in str(chain.fails([ix(probe_id, FAIL, b"\x01")]))
    assert "InvalidInstructionData" in str(chain.fails([ix(probe_id, 200)]))


def _math(chain, probe_id, op: int, a: int, b: int, c: int = 0):
    payload = struct.pack("<BQQQ", op, a % 2**64, b % 2**64, c)
    result = chain.send([ix(probe_id, MATH, payload)])
    if not isinstance(result, TransactionMetadata):
        return None
    return struct.unpack("<Q", bytes(result.return_data().data))[0]


def _c_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


@pytest.mark.parametrize("a,b", [(7, 2), (-7, 2), (7, -2), (-7, -2), (-(2**63), 3), (5, 9)])
def test_signed_division_through_function_pointer_table(chain, probe_id, a, b):
    assert _math(chain, probe_id, 0, a, b) == _c_div(a, b) % 2**64
    assert _math(chain, probe_id, 1, a, b) == (a - _c_div(a, b) * b) % 2**64
    assert _math(chain, probe_id, 0, a, 0) is None


@pytest.mark.parametrize(
    "a,b,c", [(2**64 - 1, 2**64 - 1, 2**64 - 1), (10**18, 10**12, 10**13), (3, 5, 2), (2**63, 4, 3)]
)
def test_wide_multiplication(chain, probe_id, a, b, c):
    assert _math(chain, probe_id, 2, a, b) == (a * b) >> 64
    expected = a * b // c
    assert _math(chain, probe_id, 3, a, b, c) == (expected if expected < 2**64 else None)
    assert _math(chain, probe_id, 4, a, b) == (a * b if a * b < 2**64 else None)


def test_call_across_object_files(chain, probe_id):
    result = chain.ok([ix(probe_id, SHUFFLE, struct.pack("<QB", 42, 200))])
    permutation = list(bytes(result.return_data().data))
    assert sorted(permutation) == list(range(200))
    assert permutation != list(range(200))
