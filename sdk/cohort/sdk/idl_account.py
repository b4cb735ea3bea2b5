"""The coordinator's IDL on chain, in Anchor's IDL account, so Anchor clients (`Program.fetchIdl`) and the
Solana Explorer decode cohort's accounts and instructions like any Anchor program's.

The account sits at create_with_seed(base, "anchor:idl", program), base = the program's PDA of no seeds;
it holds sha256("account:IdlAccount")[..8], the authority, a u32 length and the zlib-compressed IDL JSON.
Instructions start with Anchor's IDL tag and a Borsh enum: Create{data_len} / Write{data} / Close. The
program lets only its upgrade authority create the account.
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass
from typing import Any

from solders.instruction import AccountMeta, Instruction
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from . import loader_v3
from .errors import TransactionFailed
from .rpc import Rpc

IDL_SEED = "anchor:idl"
IDL_IX_TAG = struct.pack("<Q", 0x0A69E9A778BCF440)
ACCOUNT_DISCRIMINATOR = bytes.fromhex("8c24a60267c521a4")  # sha256("account:IdlAccount")[:8]
HEADER = 8 + 32 + 4
CREATE_LIMIT = 10_000  # what the program creates in one go (one CreateAccountWithSeed)
GROWTH = 10 * 1024  # what one Resize adds at most (an instruction may grow an account by 10 KiB)
MAX_IDL = 256 * 1024  # a sanity bound on the compressed IDL (the coordinator's is ~11 KB)
WRITE_CHUNK = 900  # IDL bytes per Write transaction (a legacy transaction is at most 1232 bytes)


def idl_address(program_id: Pubkey) -> Pubkey:
    base = Pubkey.find_program_address([], program_id)[0]
    return Pubkey.create_with_seed(base, IDL_SEED, program_id)


def compress(idl: dict[str, Any], program_id: Pubkey) -> bytes:
    """The IDL as published: its address set to the deployed program, minified, zlib-compressed."""
    body = dict(idl, address=str(program_id))
    return zlib.compress(json.dumps(body, separators=(",", ":")).encode(), 9)


def create_instruction(authority: Pubkey, program_id: Pubkey, data_len: int) -> Instruction:
    base = Pubkey.find_program_address([], program_id)[0]
    accounts = [
        AccountMeta(authority, True, True),
        AccountMeta(idl_address(program_id), False, True),
        AccountMeta(base, False, False),
        AccountMeta(loader_v3.SYSTEM_PROGRAM, False, False),
        AccountMeta(program_id, False, False),
        AccountMeta(loader_v3.programdata_address(program_id), False, False),
    ]
    return Instruction(program_id, IDL_IX_TAG + b"\x00" + struct.pack("<Q", data_len), accounts)


def write_instruction(authority: Pubkey, program_id: Pubkey, chunk: bytes) -> Instruction:
    accounts = [
        AccountMeta(idl_address(program_id), False, True),
        AccountMeta(authority, True, False),
    ]
    data = IDL_IX_TAG + b"\x02" + struct.pack("<I", len(chunk)) + chunk
    return Instruction(program_id, data, accounts)


def resize_instruction(authority: Pubkey, program_id: Pubkey, data_len: int) -> Instruction:
    """Room for `data_len` bytes of IDL (at most GROWTH more than the account holds), the authority paying."""
    accounts = [AccountMeta(idl_address(program_id), False, True), AccountMeta(authority, True, True),
                AccountMeta(loader_v3.SYSTEM_PROGRAM, False, False)]  # fmt: skip
    return Instruction(program_id, IDL_IX_TAG + b"\x06" + struct.pack("<Q", data_len), accounts)


def close_instruction(authority: Pubkey, program_id: Pubkey, recipient: Pubkey) -> Instruction:
    accounts = [AccountMeta(idl_address(program_id), False, True), AccountMeta(authority, True, False),
                AccountMeta(recipient, False, True)]  # fmt: skip
    return Instruction(program_id, IDL_IX_TAG + b"\x05", accounts)


@dataclass(frozen=True)
class IdlAccount:
    authority: Pubkey
    compressed: bytes

    def idl(self) -> dict[str, Any]:
        try:
            return json.loads(zlib.decompress(self.compressed))
        except (zlib.error, ValueError) as e:
            raise TransactionFailed(f"the on-chain IDL does not decompress to JSON ({e})") from None


def decode_account(data: bytes) -> IdlAccount:
    if len(data) < HEADER or data[:8] != ACCOUNT_DISCRIMINATOR:
        raise TransactionFailed("the account at the IDL address is not an Anchor IDL account")
    (length,) = struct.unpack_from("<I", data, 40)
    if HEADER + length > len(data):
        raise TransactionFailed("the IDL account's length runs past its data")
    return IdlAccount(Pubkey.from_bytes(data[8:40]), bytes(data[HEADER : HEADER + length]))


async def fetch(rpc: Rpc, program_id: Pubkey) -> IdlAccount | None:
    found = await rpc.account_owner_and_data(idl_address(program_id))
    if found is None or not found[1]:
        return None
    if found[0] != program_id:
        raise TransactionFailed(f"the IDL address of {program_id} is not owned by the program")
    return decode_account(found[1])


@dataclass(frozen=True)
class Published:
    address: Pubkey
    compressed_bytes: int
    writes: int
    replaced: bool  # an older IDL was closed first
    unchanged: bool  # the same IDL was already there: nothing sent


async def publish(
    rpc: Rpc, authority: Keypair, program_id: Pubkey, idl: dict[str, Any]
) -> Published:
    """Put `idl` on chain (replacing a different one); `authority` must be the program's upgrade authority."""
    compressed = compress(idl, program_id)
    if len(compressed) > MAX_IDL:
        raise TransactionFailed(
            f"the compressed IDL is {len(compressed)} bytes; at most {MAX_IDL} are published"
        )
    address = idl_address(program_id)
    existing = await fetch(rpc, program_id)
    if existing is not None and existing.compressed == compressed:
        return Published(address, len(compressed), 0, False, True)
    if existing is not None:
        if existing.authority != authority.pubkey():
            raise TransactionFailed(
                f"the IDL of {program_id} belongs to {existing.authority}, not {authority.pubkey()}"
            )
        await rpc.send(
            [close_instruction(authority.pubkey(), program_id, authority.pubkey())], authority
        )
    room = min(len(compressed), CREATE_LIMIT - HEADER)  # one Create, then Resize 10 KiB at a time
    await rpc.send([create_instruction(authority.pubkey(), program_id, room)], authority)
    while room < len(compressed):
        room = min(len(compressed), room + GROWTH)
        await rpc.send([resize_instruction(authority.pubkey(), program_id, room)], authority)
    chunks = [compressed[i : i + WRITE_CHUNK] for i in range(0, len(compressed), WRITE_CHUNK)]
    for chunk in chunks:  # in order: each Write appends
        await rpc.send([write_instruction(authority.pubkey(), program_id, chunk)], authority)
    return Published(address, len(compressed), len(chunks), existing is not None, False)
