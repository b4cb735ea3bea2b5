"""Deploy through the real upgradeable-loader transactions (the strict path: Agave's deploy-time ELF checks
and verifier run, unlike add_program), then invoke and upgrade."""

from __future__ import annotations

import struct

from solders.hash import Hash
from solders.instruction import Instruction
from solders.keypair import Keypair
from solders.message import Message
from solders.pubkey import Pubkey
from solders.transaction import Transaction

from cohort.sdk import loader_v3


def deploy(chain, elf: bytes, program: Keypair | None = None) -> Keypair:
    """Buffer + chunked writes + DeployWithMaxDataLen (Upgrade when `program` is already deployed)."""
    new = program is None
    program = program or Keypair()
    phases = loader_v3.plan_deploy(
        chain.payer,
        elf,
        Keypair(),
        chain.svm.minimum_balance_for_rent_exemption,
        program=program if new else None,
        program_id=None if new else program.pubkey(),
    )
    for phase in phases:
        for step in phase:
            chain.ok(step.instructions, step.signers)
    return program


def test_deploy_through_loader_transactions_then_invoke(chain, probe):
    elf = probe.so_path.read_bytes()
    program = deploy(chain, elf)

    account = chain.svm.get_account(program.pubkey())
    assert account.executable and account.owner == loader_v3.LOADER_V3
    programdata = chain.svm.get_account(loader_v3.programdata_address(program.pubkey()))
    header = bytes(programdata.data[: loader_v3.PROGRAMDATA_HEADER])
    assert struct.unpack_from("<I", header)[0] == 3  # ProgramData
    assert (
        header[12] == 1 and Pubkey.from_bytes(header[13:45]) == chain.payer.pubkey()
    )  # upgradeable
    assert bytes(programdata.data[loader_v3.PROGRAMDATA_HEADER :][: len(elf)]) == elf

    result = chain.ok([Instruction(program.pubkey(), bytes([7]) + struct.pack("<QB", 1, 16), [])])
    assert sorted(result.return_data().data) == list(range(16))


def test_upgrade_in_a_later_slot(chain, probe):
    elf = probe.so_path.read_bytes()
    program = deploy(chain, elf)
    slot = chain.svm.get_clock().slot
    chain.svm.warp_to_slot(slot + 1)  # the loader refuses a second deploy in the same slot
    deploy(chain, elf, program)
    result = chain.ok([Instruction(program.pubkey(), bytes([4]) + b"abc", [])])
    assert len(bytes(result.return_data().data)) == 32


def test_write_chunk_fills_a_packet_exactly(chain):
    payer = chain.payer.pubkey()
    chunk = loader_v3.max_write_chunk(payer, payer)
    ix = loader_v3.write(Keypair().pubkey(), payer, 0, bytes(chunk))
    tx = Transaction([chain.payer], Message([ix], payer), Hash.default())
    assert len(bytes(tx)) == loader_v3.MAX_PACKET
