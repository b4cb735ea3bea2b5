"""Deploying a program over RPC through the upgradeable loader, the way `solana program deploy` does.

A buffer is created, the ELF is written into it in chunks sent concurrently, then the program is deployed
from it (or upgraded, when the program keypair's account already holds a program). The buffer's keypair is
kept on disk until the deploy finishes, so an interrupted deploy resumes: chunks already in the buffer are
not sent again. The program keypair (and so the program id) lives in contracts/target/.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from solders.keypair import Keypair
from solders.pubkey import Pubkey

from . import loader_v3
from .errors import InsufficientFunds, TransactionFailed
from .rpc import Rpc
from .wallet import load_or_create_keypair, sol

CONCURRENT_WRITES = 16
FEE = 5_000


@dataclass(frozen=True)
class DeployResult:
    program_id: Pubkey
    upgraded: bool
    elf_size: int
    writes_sent: int
    writes_skipped: int  # chunks an interrupted deploy had already written
    seconds: float


def buffer_keypair_path(program_keypair: Path) -> Path:
    return program_keypair.with_name(program_keypair.stem + "-buffer.json")


async def deploy_program(
    rpc: Rpc,
    payer: Keypair,
    elf: bytes,
    program_keypair: Path,
    *,
    progress: Callable[[int, int], None] | None = None,
    concurrency: int = CONCURRENT_WRITES,
) -> DeployResult:
    """Deploy (or upgrade) `elf` as the program whose keypair is at `program_keypair` (created if absent).

    `progress(done, total)` is called as write chunks land.
    """
    if not elf:
        raise ValueError("the ELF is empty")
    started = time.perf_counter()
    program = load_or_create_keypair(program_keypair)
    existing = await rpc.account_owner_and_data(program.pubkey())
    if existing is not None and existing[0] != loader_v3.LOADER_V3:
        raise TransactionFailed(f"{program.pubkey()} exists and is not an upgradeable program")
    upgrade = existing is not None

    buffer_path = buffer_keypair_path(program_keypair)
    buffer = load_or_create_keypair(buffer_path)
    size = loader_v3.BUFFER_HEADER + len(elf)
    held = await _buffer_contents(rpc, buffer.pubkey(), payer.pubkey(), size)
    if held is None and await rpc.account_data(buffer.pubkey()) is not None:
        # a buffer of another ELF size or authority: start over with a fresh one
        buffer_path.unlink()
        buffer = load_or_create_keypair(buffer_path)

    chunk = loader_v3.max_write_chunk(payer.pubkey(), payer.pubkey())
    writes = loader_v3.plan_writes(elf, chunk)
    needed = (0 if held is not None else await rpc.rent_exempt(size)) + FEE * (len(writes) + 2)
    if not upgrade:
        needed += await rpc.rent_exempt(loader_v3.PROGRAMDATA_HEADER + 2 * len(elf))
        needed += await rpc.rent_exempt(loader_v3.PROGRAM_SIZE)
    balance = await rpc.balance(payer.pubkey())
    if balance < needed:
        raise InsufficientFunds(
            f"wallet {payer.pubkey()} holds {sol(balance)}; deploying {len(elf)} bytes needs about "
            f"{sol(needed)} (fund it, e.g. `cohort wallet airdrop`)"
        )

    if held is None:
        create = loader_v3.create_buffer(
            payer.pubkey(), buffer.pubkey(), payer.pubkey(), len(elf), await rpc.rent_exempt(size)
        )
        await rpc.send(create, payer, [buffer])
        held = bytes(len(elf))
    todo = [w for w in writes if held[w.offset : w.offset + len(w.chunk)] != w.chunk]
    skipped = len(writes) - len(todo)
    done = skipped
    if progress:
        progress(done, len(writes))
    limit = asyncio.Semaphore(concurrency)

    async def send(w: loader_v3.WritePlan) -> None:
        nonlocal done
        async with limit:
            await rpc.send(
                [loader_v3.write(buffer.pubkey(), payer.pubkey(), w.offset, w.chunk)], payer
            )
        done += 1
        if progress:
            progress(done, len(writes))

    await asyncio.gather(*(send(w) for w in todo))
    if await _buffer_contents(rpc, buffer.pubkey(), payer.pubkey(), size) != elf:
        raise TransactionFailed(
            "the buffer does not hold the ELF after writing; run deploy again to resume"
        )

    if upgrade:
        await rpc.send(
            [loader_v3.upgrade(program.pubkey(), buffer.pubkey(), payer.pubkey(), payer.pubkey())],
            payer,
        )
    else:
        finish = loader_v3.deploy_with_max_data_len(
            payer.pubkey(), program.pubkey(), buffer.pubkey(), payer.pubkey(),
            await rpc.rent_exempt(loader_v3.PROGRAM_SIZE), 2 * len(elf),
        )  # fmt: skip
        await rpc.send(finish, payer, [program])
    buffer_path.unlink(missing_ok=True)  # the buffer is consumed; a later deploy starts a new one
    return DeployResult(
        program.pubkey(), upgrade, len(elf), len(todo), skipped, time.perf_counter() - started
    )


async def _buffer_contents(rpc: Rpc, buffer: Pubkey, authority: Pubkey, size: int) -> bytes | None:
    """The ELF area of our buffer, or None when there is no usable buffer of this size and authority."""
    found = await rpc.account_owner_and_data(buffer)
    if found is None or found[0] != loader_v3.LOADER_V3 or len(found[1]) != size:
        return None
    data = found[1]
    if data[:4] != b"\x01\0\0\0" or data[4] != 1 or data[5:37] != bytes(authority):
        return None
    return data[loader_v3.BUFFER_HEADER :]
