"""Instructions of the upgradeable BPF loader (loader v3), the path `solana program deploy` takes.

Neither solders nor solana-py ships builders for them. The instruction data is bincode: a u32 tag then the
fields. Deploying is three kinds of transaction: create + initialize a buffer, write the ELF into it in chunks
that fit one packet, then create the program account and `DeployWithMaxDataLen` (or `Upgrade` an existing one).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

from solders.instruction import AccountMeta, Instruction
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.system_program import CreateAccountParams, create_account
from solders.sysvar import CLOCK, RENT

from .rpc import MAX_PACKET, transaction_size

LOADER_V3 = Pubkey.from_string("BPFLoaderUpgradeab1e11111111111111111111111")
SYSTEM_PROGRAM = Pubkey.from_string("11111111111111111111111111111111")

BUFFER_HEADER = 37  # u32 tag 1 | Option<Pubkey> authority
PROGRAM_SIZE = 36  # u32 tag 2 | programdata address
PROGRAMDATA_HEADER = 45  # u32 tag 3 | u64 deploy slot | Option<Pubkey> authority

_INITIALIZE_BUFFER, _WRITE, _DEPLOY_WITH_MAX_DATA_LEN, _UPGRADE = 0, 1, 2, 3
_SET_AUTHORITY, _CLOSE = 4, 5


def programdata_address(program_id: Pubkey) -> Pubkey:
    """The PDA that holds a program's ELF: seeds [program_id] under the loader."""
    return Pubkey.find_program_address([bytes(program_id)], LOADER_V3)[0]


def create_buffer(
    payer: Pubkey, buffer: Pubkey, authority: Pubkey, elf_len: int, lamports: int
) -> list[Instruction]:
    """System create-account sized for the ELF, then InitializeBuffer with its write authority."""
    space = BUFFER_HEADER + elf_len
    return [
        create_account(
            CreateAccountParams(
                from_pubkey=payer, to_pubkey=buffer, lamports=lamports, space=space, owner=LOADER_V3
            )
        ),
        Instruction(
            LOADER_V3,
            struct.pack("<I", _INITIALIZE_BUFFER),
            [AccountMeta(buffer, False, True), AccountMeta(authority, False, False)],
        ),
    ]


def write(buffer: Pubkey, authority: Pubkey, offset: int, chunk: bytes) -> Instruction:
    """Write `chunk` at `offset` of the buffer's ELF area (after its 37-byte header)."""
    if offset < 0 or not chunk:
        raise ValueError(f"write needs offset >= 0 and a non-empty chunk (offset={offset})")
    data = struct.pack("<IIQ", _WRITE, offset, len(chunk)) + bytes(chunk)
    return Instruction(
        LOADER_V3, data, [AccountMeta(buffer, False, True), AccountMeta(authority, True, False)]
    )


def deploy_with_max_data_len(
    payer: Pubkey,
    program: Pubkey,
    buffer: Pubkey,
    authority: Pubkey,
    program_lamports: int,
    max_data_len: int,
) -> list[Instruction]:
    """Create the 36-byte program account, then deploy the buffer into a programdata of `max_data_len`."""
    return [
        create_account(
            CreateAccountParams(
                from_pubkey=payer,
                to_pubkey=program,
                lamports=program_lamports,
                space=PROGRAM_SIZE,
                owner=LOADER_V3,
            )
        ),
        Instruction(
            LOADER_V3,
            struct.pack("<IQ", _DEPLOY_WITH_MAX_DATA_LEN, max_data_len),
            [
                AccountMeta(payer, True, True),
                AccountMeta(programdata_address(program), False, True),
                AccountMeta(program, False, True),
                AccountMeta(buffer, False, True),
                AccountMeta(RENT, False, False),
                AccountMeta(CLOCK, False, False),
                AccountMeta(SYSTEM_PROGRAM, False, False),
                AccountMeta(authority, True, False),
            ],
        ),
    ]


def upgrade(program: Pubkey, buffer: Pubkey, spill: Pubkey, authority: Pubkey) -> Instruction:
    """Replace a deployed program's ELF with the buffer's; the buffer's lamports go to `spill`."""
    return Instruction(
        LOADER_V3,
        struct.pack("<I", _UPGRADE),
        [
            AccountMeta(programdata_address(program), False, True),
            AccountMeta(program, False, True),
            AccountMeta(buffer, False, True),
            AccountMeta(spill, False, True),
            AccountMeta(RENT, False, False),
            AccountMeta(CLOCK, False, False),
            AccountMeta(authority, True, False),
        ],
    )


def close_buffer(buffer: Pubkey, recipient: Pubkey, authority: Pubkey) -> Instruction:
    """Close a buffer (e.g. of an abandoned deploy) and return its lamports."""
    return Instruction(
        LOADER_V3,
        struct.pack("<I", _CLOSE),
        [
            AccountMeta(buffer, False, True),
            AccountMeta(recipient, False, True),
            AccountMeta(authority, True, False),
        ],
    )


def max_write_chunk(payer: Pubkey, authority: Pubkey) -> int:
    """The largest ELF chunk whose Write transaction still fits one 1,232-byte packet."""
    # long enough that the data length takes its 2-byte compact-u16 form, as real chunks do
    probe_len = 256
    probe = write(Pubkey.default(), authority, 0, bytes(probe_len))
    return MAX_PACKET - (transaction_size([probe], payer) - probe_len)


@dataclass(frozen=True)
class WritePlan:
    """One Write instruction of a deploy: where the chunk goes in the buffer."""

    offset: int
    chunk: bytes


def plan_writes(elf: bytes, chunk_size: int) -> list[WritePlan]:
    """Split an ELF into Write instructions (independent of each other, so they may be sent concurrently)."""
    if chunk_size <= 0:
        raise ValueError(f"chunk_size must be positive, got {chunk_size}")
    return [WritePlan(o, elf[o : o + chunk_size]) for o in range(0, len(elf), chunk_size)]


@dataclass(frozen=True)
class Step:
    """One transaction of a deploy: its instructions and the signers besides the fee payer."""

    instructions: list[Instruction]
    signers: list[Keypair]


def plan_deploy(
    payer: Keypair,
    elf: bytes,
    buffer: Keypair,
    rent_exempt: Callable[[int], int],
    *,
    program: Keypair | None = None,
    program_id: Pubkey | None = None,
    max_data_len: int | None = None,
) -> list[list[Step]]:
    """The transactions that deploy `elf`, in three phases; the steps within a phase are independent.

    1. create and initialize the buffer; 2. the writes (send them concurrently); 3. deploy a new program
    (`program` keypair, programdata sized `max_data_len`, default 2x the ELF so it can grow) or upgrade the
    existing `program_id`. The payer is the buffer's and the program's upgrade authority.
    `rent_exempt(space)` gives the lamports for an account of `space` bytes.
    """
    if not elf:
        raise ValueError("the ELF is empty")
    if (program is None) == (program_id is None):
        raise ValueError("give exactly one of `program` (new deploy) or `program_id` (upgrade)")
    authority = payer.pubkey()
    create = Step(
        create_buffer(
            payer.pubkey(),
            buffer.pubkey(),
            authority,
            len(elf),
            rent_exempt(BUFFER_HEADER + len(elf)),
        ),
        [buffer],
    )
    chunk = max_write_chunk(payer.pubkey(), authority)
    writes = [
        Step([write(buffer.pubkey(), authority, w.offset, w.chunk)], [])
        for w in plan_writes(elf, chunk)
    ]
    if program is not None:
        max_len = max_data_len if max_data_len is not None else 2 * len(elf)
        if max_len < len(elf):
            raise ValueError(f"max_data_len {max_len} is smaller than the ELF ({len(elf)} bytes)")
        finish = Step(
            deploy_with_max_data_len(
                payer.pubkey(),
                program.pubkey(),
                buffer.pubkey(),
                authority,
                rent_exempt(PROGRAM_SIZE),
                max_len,
            ),
            [program],
        )
    else:
        assert program_id is not None
        finish = Step([upgrade(program_id, buffer.pubkey(), payer.pubkey(), authority)], [])
    return [[create], writes, [finish]]
