"""Deploying a program over RPC through the upgradeable loader, the way `solana program deploy` does.

A buffer is created, the ELF is written into it in chunks sent concurrently (without asking for each one's
status: the buffer is read back, and chunks that did not land are sent again), then the program is deployed
from it (or upgraded, when the program keypair's account already holds a program). The buffer's keypair is
kept on disk until the deploy finishes, so an interrupted deploy resumes: chunks already in the buffer are
not sent again. A buffer that cannot be resumed (another ELF size) is closed and its rent refunded, and
`close_buffers` refunds every buffer a wallet still holds. How many writes are in flight adapts to the
cluster's rate limit (`pacing.AdaptiveLimit`). `plan_deploy_cost` says what a deploy costs before anything
is sent (the dry run).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from solders.keypair import Keypair
from solders.pubkey import Pubkey

from . import loader_v3
from .errors import CohortError, InsufficientFunds, ProgramError, TransactionFailed
from .pacing import AdaptiveLimit
from .rpc import Rpc
from .wallet import load_keypair, load_or_create_keypair, sol

CONCURRENT_WRITES = 16
FEE = 5_000  # lamports per signature
WRITE_ROUNDS = 5  # times the writes that did not land are sent again
LANDING_POLL = 0.5  # seconds between reads of the buffer while writes land
LANDING_WAIT = 10.0  # seconds without a write landing before the missing ones are sent again


@dataclass(frozen=True)
class DeployResult:
    program_id: Pubkey
    upgraded: bool
    elf_size: int
    writes_sent: int
    writes_skipped: int  # chunks an interrupted deploy had already written
    seconds: float
    lowest_concurrency: int  # the fewest writes in flight the cluster's rate limit allowed
    throttled: int  # HTTP 429 answers waited out
    refunded: int  # lamports back from a buffer that could not be resumed
    lowest_rate: float | None = (
        None  # requests per second the pace went down to (None: never paced)
    )


@dataclass(frozen=True)
class DeployCost:
    """What a deploy will send and spend, in lamports, worked out before anything is sent."""

    program_id: Pubkey | None  # None: a new program whose keypair does not exist yet
    upgrade: bool
    elf_size: int
    writes: int
    writes_done: (
        int  # not sent: already in a buffer an interrupted deploy left (or zeros a new one holds)
    )
    transactions: int
    buffer_rent: (
        int  # held while writing; back when the deploy completes (0 when the buffer exists)
    )
    programdata_rent: int  # 0 for an upgrade
    program_rent: int  # 0 for an upgrade
    fees: int
    balance: int
    stale_buffer_refund: int  # a buffer of another ELF size that the deploy closes first

    @property
    def needed(self) -> int:
        """What the wallet must hold when the deploy starts."""
        return self.buffer_rent + self.programdata_rent + self.program_rent + self.fees

    @property
    def spent(self) -> int:
        """What the wallet is poorer by afterwards (the buffer's rent comes back)."""
        return self.programdata_rent + self.program_rent + self.fees


def buffer_keypair_path(program_keypair: Path) -> Path:
    return program_keypair.with_name(program_keypair.stem + "-buffer.json")


def deploy_cost(
    *, elf_size: int, writes: int, writes_done: int, upgrade: bool, buffer_exists: bool,
    rent: Callable[[int], int], program_id: Pubkey | None, balance: int, stale_buffer_refund: int = 0,
) -> DeployCost:  # fmt: skip
    """The pure arithmetic of a deploy's cost; `rent(space)` is the rent-exempt minimum of `space` bytes."""
    todo = writes - writes_done
    create = 0 if buffer_exists else 1
    # signatures: create buffer (payer + buffer), writes (payer), deploy (payer + program) or upgrade
    signatures = 2 * create + todo + (1 if upgrade else 2) + (1 if stale_buffer_refund else 0)
    return DeployCost(
        program_id=program_id,
        upgrade=upgrade,
        elf_size=elf_size,
        writes=writes,
        writes_done=writes_done,
        transactions=create + todo + 1 + (1 if stale_buffer_refund else 0),
        buffer_rent=0 if buffer_exists else rent(loader_v3.BUFFER_HEADER + elf_size),
        programdata_rent=0 if upgrade else rent(loader_v3.PROGRAMDATA_HEADER + 2 * elf_size),
        program_rent=0 if upgrade else rent(loader_v3.PROGRAM_SIZE),
        fees=FEE * signatures,
        balance=balance,
        stale_buffer_refund=stale_buffer_refund,
    )


@dataclass(frozen=True)
class _State:
    """What the cluster holds for this deploy: the program, the buffer we may resume, a stale buffer."""

    upgrade: bool
    held: bytes | None  # the ELF area of a resumable buffer
    stale_lamports: int  # a buffer of ours that cannot be resumed (another size): closed first


async def _read_state(
    rpc: Rpc, payer: Pubkey, elf: bytes, program: Pubkey | None, buffer: Pubkey | None
) -> _State:
    upgrade = False
    if program is not None:
        existing = await rpc.account_owner_and_data(program)
        if existing is not None and existing[0] != loader_v3.LOADER_V3:
            raise TransactionFailed(f"{program} exists and is not an upgradeable program")
        upgrade = existing is not None
    held, stale = None, 0
    if buffer is not None:
        size = loader_v3.BUFFER_HEADER + len(elf)
        found = await rpc.account_owner_and_data(buffer)
        if found is not None and _buffer_authority(*found) == payer:
            if len(found[1]) == size:
                held = found[1][loader_v3.BUFFER_HEADER :]
            else:
                stale = await rpc.balance(buffer)
    return _State(upgrade, held, stale)


async def plan_deploy_cost(
    rpc: Rpc, payer: Pubkey, elf: bytes, program_keypair: Path
) -> DeployCost:
    """The dry run: read the cluster, send nothing, create no keypair."""
    if not elf:
        raise ValueError("the ELF is empty")
    program = load_keypair(program_keypair).pubkey() if program_keypair.exists() else None
    buffer_path = buffer_keypair_path(program_keypair)
    buffer = load_keypair(buffer_path).pubkey() if buffer_path.exists() else None
    state = await _read_state(rpc, payer, elf, program, buffer)
    return await _cost(rpc, payer, elf, program, state)


async def _cost(
    rpc: Rpc, payer: Pubkey, elf: bytes, program: Pubkey | None, state: _State
) -> DeployCost:
    writes = loader_v3.plan_writes(elf, loader_v3.max_write_chunk(payer, payer))
    held = (
        bytes(len(elf)) if state.held is None else state.held
    )  # a new buffer starts zeroed: zero chunks are not sent
    done = sum(held[w.offset : w.offset + len(w.chunk)] == w.chunk for w in writes)
    sizes = [loader_v3.BUFFER_HEADER + len(elf), loader_v3.PROGRAMDATA_HEADER + 2 * len(elf),
             loader_v3.PROGRAM_SIZE]  # fmt: skip
    rents = dict(
        zip(sizes, await asyncio.gather(*(rpc.rent_exempt(s) for s in sizes)), strict=True)
    )
    return deploy_cost(
        elf_size=len(elf), writes=len(writes), writes_done=done, upgrade=state.upgrade,
        buffer_exists=state.held is not None, rent=rents.__getitem__, program_id=program,
        balance=await rpc.balance(payer), stale_buffer_refund=state.stale_lamports,
    )  # fmt: skip


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
    buffer_path = buffer_keypair_path(program_keypair)
    buffer = load_or_create_keypair(buffer_path)
    state = await _read_state(rpc, payer.pubkey(), elf, program.pubkey(), buffer.pubkey())
    cost = await _cost(rpc, payer.pubkey(), elf, program.pubkey(), state)
    if cost.balance + cost.stale_buffer_refund < cost.needed:
        raise InsufficientFunds(
            f"wallet {payer.pubkey()} holds {sol(cost.balance)}; deploying {len(elf)} bytes needs about "
            f"{sol(cost.needed)} (fund it, e.g. `cohort wallet airdrop`)"
        )
    if state.stale_lamports:
        # a buffer of another ELF size: refund it, then start over with a fresh one
        await rpc.send(
            [loader_v3.close_buffer(buffer.pubkey(), payer.pubkey(), payer.pubkey())], payer
        )
        buffer_path.unlink()
        buffer = load_or_create_keypair(buffer_path)

    held = state.held
    if held is None:
        if await rpc.account_data(buffer.pubkey()) is not None:
            buffer_path.unlink()  # not ours to write (another authority): use a fresh keypair
            buffer = load_or_create_keypair(buffer_path)
        create = loader_v3.create_buffer(
            payer.pubkey(), buffer.pubkey(), payer.pubkey(), len(elf), cost.buffer_rent
        )
        await rpc.send(create, payer, [buffer])
        held = bytes(len(elf))
    try:
        result = await _write_and_deploy(
            rpc, payer, elf, program, buffer, held, state, cost, progress, concurrency, started
        )
    except ProgramError:
        raise  # the program refused the deploy itself; the error says why
    except TransactionFailed as e:
        raise TransactionFailed(f"{e}{_BUFFER_KEPT}", e.logs) from None
    except CohortError as e:
        raise type(e)(f"{e}{_BUFFER_KEPT}") from None
    buffer_path.unlink(missing_ok=True)  # the buffer is consumed; a later deploy starts a new one
    return result


# a deploy that failed part way keeps its buffer, with what was written and its rent
_BUFFER_KEPT = ("; the buffer written so far is kept: run the same deploy again to resume, "
                "or `cohort deploy --close-buffers` to refund its rent")  # fmt: skip


async def _write_and_deploy(
    rpc: Rpc, payer: Keypair, elf: bytes, program: Keypair, buffer: Keypair, held: bytes,
    state: _State, cost: DeployCost, progress: Callable[[int, int], None] | None, concurrency: int,
    started: float,
) -> DeployResult:  # fmt: skip
    writes = loader_v3.plan_writes(elf, loader_v3.max_write_chunk(payer.pubkey(), payer.pubkey()))
    missing = [w for w in writes if held[w.offset : w.offset + len(w.chunk)] != w.chunk]
    skipped, sent = len(writes) - len(missing), 0
    if progress:
        progress(skipped, len(writes))
    limit = AdaptiveLimit(concurrency)

    async def send(w: loader_v3.WritePlan) -> None:
        nonlocal sent
        async with limit.slot():
            ix = loader_v3.write(buffer.pubkey(), payer.pubkey(), w.offset, w.chunk)
            await rpc.send([ix], payer, confirm=False)  # the buffer itself says what landed
        limit.succeeded()
        sent += 1
        if progress:
            progress(min(len(writes), skipped + sent), len(writes))

    rpc.throttle_listeners.append(limit.throttled)
    rpc.pacer = limit
    try:
        # writes are sent without waiting for each to confirm (a public RPC would be asked for every
        # one's status, many times); the buffer is read back instead, and what did not land is sent again
        for _ in range(WRITE_ROUNDS):
            if not missing:
                break
            await _send_all(send, missing)
            missing = await _wait_for_writes(rpc, buffer.pubkey(), payer.pubkey(), elf, writes)
    finally:
        rpc.throttle_listeners.remove(limit.throttled)
        rpc.pacer = None
    if missing:
        raise TransactionFailed(
            f"{len(missing)} of {len(writes)} writes did not land in {WRITE_ROUNDS} tries; "
            "run deploy again to resume"
        )

    if state.upgrade:
        await rpc.send(
            [loader_v3.upgrade(program.pubkey(), buffer.pubkey(), payer.pubkey(), payer.pubkey())],
            payer,
        )
    else:
        finish = loader_v3.deploy_with_max_data_len(
            payer.pubkey(), program.pubkey(), buffer.pubkey(), payer.pubkey(),
            cost.program_rent, 2 * len(elf),
        )  # fmt: skip
        await rpc.send(finish, payer, [program])
    return DeployResult(
        program.pubkey(), state.upgrade, len(elf), sent, skipped,
        time.perf_counter() - started, limit.lowest, limit.throttles, state.stale_lamports,
        limit.lowest_rate,
    )  # fmt: skip


async def _send_all(send: Callable[[loader_v3.WritePlan], Awaitable[None]], writes: list) -> None:
    tasks = [asyncio.ensure_future(send(w)) for w in writes]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:  # one write failed: stop the others before reporting it
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


async def _wait_for_writes(
    rpc: Rpc, buffer: Pubkey, authority: Pubkey, elf: bytes, writes: list[loader_v3.WritePlan]
) -> list[loader_v3.WritePlan]:
    """Read the buffer back until every write landed or none landed for LANDING_WAIT seconds; returns
    the writes still missing."""
    size = loader_v3.BUFFER_HEADER + len(elf)
    missing: list[loader_v3.WritePlan] = list(writes)
    quiet_since = time.monotonic()
    while True:
        held = await _buffer_contents(rpc, buffer, authority, size)
        if held is None:
            raise TransactionFailed(f"the deploy buffer {buffer} is gone (closed by someone?)")
        still = [w for w in writes if held[w.offset : w.offset + len(w.chunk)] != w.chunk]
        if len(still) < len(missing):
            quiet_since = time.monotonic()
        missing = still
        if not missing or time.monotonic() - quiet_since > LANDING_WAIT:
            return missing
        await asyncio.sleep(LANDING_POLL)


@dataclass(frozen=True)
class ClosedBuffer:
    address: Pubkey
    lamports: int


async def close_buffers(
    rpc: Rpc, authority: Keypair, recipient: Pubkey | None = None
) -> list[ClosedBuffer]:
    """Close every loader buffer whose authority is `authority` (abandoned deploys) and refund its rent."""
    found = await rpc.program_accounts(
        loader_v3.LOADER_V3, discriminator=b"\x01\0\0\0\x01" + bytes(authority.pubkey())
    )
    closed = []
    for address, _data in found:
        lamports = await rpc.balance(address)
        ix = loader_v3.close_buffer(address, recipient or authority.pubkey(), authority.pubkey())
        await rpc.send([ix], authority)
        closed.append(ClosedBuffer(address, lamports))
    return closed


def _buffer_authority(owner: Pubkey, data: bytes) -> Pubkey | None:
    """The write authority of a loader buffer account (None: not a buffer, or an immutable one)."""
    if owner != loader_v3.LOADER_V3 or len(data) < loader_v3.BUFFER_HEADER:
        return None
    if data[:4] != b"\x01\0\0\0" or data[4] != 1:
        return None
    return Pubkey.from_bytes(data[5:37])


async def _buffer_contents(rpc: Rpc, buffer: Pubkey, authority: Pubkey, size: int) -> bytes | None:
    """The ELF area of our buffer, or None when there is no usable buffer of this size and authority."""
    found = await rpc.account_owner_and_data(buffer)
    if found is None or _buffer_authority(*found) != authority or len(found[1]) != size:
        return None
    return found[1][loader_v3.BUFFER_HEADER :]
