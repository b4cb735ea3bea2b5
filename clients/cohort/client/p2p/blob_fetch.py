"""Fetching blobs: the given providers in order, until one gives verified bytes.

Attempts are hedged: when a provider has not begun its answer (the length header) within `hedge_after`,
or, streaming, falls behind its share of the body deadline (`FetchPolicy.on_pace`), the next one is asked
alongside it, up to `max_parallel` at once; the first verified answer wins and the others are cancelled.
A dead or far provider then costs about `hedge_after`, not `open_timeout`, a lost packet on one path no
longer stalls a round, and one that sends the right header and then drips costs about `hedge_after` too,
not the body deadline. A provider that streams on pace is never hedged (large blobs are not fetched
twice).

Each attempt is bounded three times: `open_timeout` to connect and get an answer,
`progress_timeout` for every chunk of the body (a provider that sends nothing for that long is
dropped, so a dead peer costs seconds, not QUIC's 30 s idle timeout), and a deadline for the whole
body scaled by its size, `deadline_slack + size / min_rate` (a provider that drips a byte now and
then never stalls, but is dropped all the same). Bytes are checked against the hash before anyone
sees them; a provider that sends the wrong bytes or more than `max_size` is skipped.

A caller that knows a blob's size (`expected_size`, at least `stripe_min`) has it fetched from each
provider in `lanes` parts side by side, each on its own connection: over a lossy long link one QUIC
connection's loss recovery, not the link's rate, bounds a fetch (measured at 120 ms one way and 1% loss:
a 176 KB result took 2.7 s median, 7.6 s at worst, on one connection, and 1.7 s / 1.8 s on four). The
parts come from one provider and the whole is checked against the hash, so a bad part is that
provider's fault alone.

Callers that want a blob already being fetched wait for that fetch, but keep their own terms: a
result larger than their `max_size` is refused, and if the shared fetch fails they try their own
providers.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .blob_protocol import BLOB_PROTOCOL, LENGTH_PREFIX, part_request
from .blob_store import BlobStore, check_hash
from .identity import NodeId
from .transport import (
    MAX_LANES,
    READ_CHUNK,
    PeerAddress,
    RemoteError,
    Reply,
    Status,
    Transport,
    TransportError,
)

log = logging.getLogger(__name__)

DEFAULT_MAX_BLOB = 256 << 20

Progress = Callable[[int, int], None]
"""Called with (bytes received, total bytes) as an attempt advances."""


@dataclass(frozen=True)
class FetchPolicy:
    open_timeout: float = 5.0
    progress_timeout: float = 5.0
    max_size: int = DEFAULT_MAX_BLOB
    max_concurrent: int = 8
    # of those, the most that `background` fetches (a check's parts) may hold, half by default: a round's
    # results always find a slot, however slowly a trainer's committed states come
    max_background: int | None = None
    min_rate: float = 256 << 10  # bytes per second a provider must average over a whole blob
    deadline_slack: float = 10.0
    hedge_after: float = (
        1.0  # seconds without an answer's header before the next provider is asked too
    )
    max_parallel: int = 3  # attempts of one fetch at once
    lanes: int = 4  # parts of a blob of known size taken from one provider side by side
    stripe_min: int = 64 << 10  # smaller blobs come whole

    def __post_init__(self) -> None:
        if self.open_timeout <= 0 or self.progress_timeout <= 0 or self.hedge_after <= 0:
            raise ValueError("timeouts must be positive")
        if self.max_parallel < 1:
            raise ValueError("max_parallel must be >= 1")
        if not 1 <= self.lanes <= MAX_LANES or self.stripe_min < 1:
            raise ValueError(f"lanes must be 1..{MAX_LANES} and stripe_min positive")
        if self.min_rate <= 0 or self.deadline_slack <= 0:
            raise ValueError("min_rate and deadline_slack must be positive")
        if self.max_size < 0:
            raise ValueError("max_size must be >= 0")
        if self.max_concurrent < 1:
            raise ValueError("max_concurrent must be >= 1")
        if self.max_background is not None and not 1 <= self.max_background <= self.max_concurrent:
            raise ValueError("max_background must be 1..max_concurrent")

    def body_deadline(self, size: int) -> float:
        """Seconds a provider gets to deliver a body of `size` bytes."""
        return self.deadline_slack + size / self.min_rate

    def on_pace(self, size: int, got: int, elapsed: float) -> bool:
        """Whether an attempt that has had `got` of `size` bytes `elapsed` seconds after it began is on
        course to deliver within its share of the body deadline (the deadline split over `max_parallel`
        providers, so that the last still has its share when the others fell behind), after a start-up
        allowance of `hedge_after`."""
        share = self.body_deadline(size) / self.max_parallel
        return got >= size * min(1.0, (elapsed - self.hedge_after) / share)

    def parts(self, expected_size: int | None) -> list[tuple[int, int]] | None:
        """(offset, length) of each part of a blob of `expected_size` bytes; None: fetch it whole."""
        if expected_size is None or self.lanes < 2 or expected_size < self.stripe_min:
            return None
        step = -(-expected_size // self.lanes)
        return [(offset, step) for offset in range(0, expected_size, step)]


@dataclass(frozen=True)
class Attempt:
    provider: NodeId
    error: str
    status: Status | None = None  # the provider's answer when it answered with an error status


@dataclass(frozen=True)
class Fetched:
    data: bytes
    provider: NodeId
    failed: tuple[Attempt, ...] = field(default=())


class BlobFetchError(Exception):
    """No provider delivered the blob."""

    def __init__(self, blob: bytes, attempts: Sequence[Attempt]) -> None:
        tried = "; ".join(f"{a.provider.short()}: {a.error}" for a in attempts) or "no providers"
        super().__init__(f"blob {blob.hex()[:16]} not fetched ({tried})")
        self.blob = blob
        self.attempts = tuple(attempts)

    @property
    def not_held(self) -> bool:
        """Every provider asked answered that it does not hold the blob (none failed in another way)."""
        return bool(self.attempts) and all(a.status == Status.NOT_FOUND for a in self.attempts)


class _BadProvider(Exception):
    pass


@dataclass(frozen=True)
class _Terms:
    """One caller's terms for a fetch: the most bytes it accepts, the size it expects, its progress."""

    limit: int
    expected: int | None
    progress: Progress | None
    background: bool = False
    lane: int = 0  # the connection a blob fetched whole comes on
    min_rate: float | None = None  # the caller's rate a provider must average (None: the policy's)

    def body_deadline(self, policy: FetchPolicy, size: int) -> float:
        rate = policy.min_rate if self.min_rate is None else self.min_rate
        return policy.deadline_slack + size / rate


class _Received:
    """Bytes of one attempt so far, over all its parts, reported to the caller's progress callback; and
    whether it keeps pace (a provider whose header arrived is judged by its bytes, not its header)."""

    def __init__(self, progress: Progress | None, started: float) -> None:
        self.progress, self.got, self.started = progress, 0, started
        self.size: int | None = None  # the blob's length, once a header said it

    def add(self, count: int, size: int) -> None:
        self.got += count
        if self.progress is not None:
            self.progress(self.got, size)

    def on_pace(self, policy: FetchPolicy, now: float) -> bool:
        elapsed = now - self.started
        if self.size is None:  # no header yet
            return elapsed < policy.hedge_after
        return policy.on_pace(self.size, self.got, elapsed)


class BlobFetcher:
    """Fetches blobs for one node; at most `policy.max_concurrent` fetches run at once, at most
    `policy.max_background` of them background ones."""

    def __init__(
        self,
        transport: Transport,
        store: BlobStore | None = None,
        policy: FetchPolicy | None = None,
    ) -> None:
        self.transport = transport
        self.store = store
        self.policy = policy or FetchPolicy()
        self._slots = asyncio.Semaphore(self.policy.max_concurrent)
        background = self.policy.max_background
        self._background_slots = asyncio.Semaphore(
            max(1, self.policy.max_concurrent // 2) if background is None else background
        )
        self._inflight: dict[bytes, asyncio.Task[Fetched]] = {}
        self.bytes_fetched = 0
        # background blobs fetched whole (a check's many small parts) take the lanes in turn: over a lossy
        # long link each connection's loss recovery bounds its rate, so side by side on one connection they
        # would come no faster than one after the other. Results keep lane 0 (always dialled, never waits)
        self._next_lane = 0

    async def fetch(
        self,
        blob: bytes,
        providers: Sequence[PeerAddress],
        *,
        round: int | None = None,
        max_size: int | None = None,
        expected_size: int | None = None,
        progress: Progress | None = None,
        background: bool = False,
        min_rate: float | None = None,
    ) -> bytes:
        """The verified bytes of `blob`, kept in the store for `round` when a round is given. A `background`
        fetch (bulk that no round waits for) takes one of the fewer background slots. `min_rate`: the bytes
        per second a provider must average (the policy's by default; a check follows its run's rate)."""
        return (
            await self.fetch_detailed(
                blob,
                providers,
                round=round,
                max_size=max_size,
                expected_size=expected_size,
                progress=progress,
                background=background,
                min_rate=min_rate,
            )
        ).data

    async def fetch_detailed(
        self,
        blob: bytes,
        providers: Sequence[PeerAddress],
        *,
        round: int | None = None,
        max_size: int | None = None,
        expected_size: int | None = None,
        progress: Progress | None = None,
        background: bool = False,
        min_rate: float | None = None,
    ) -> Fetched:
        """Like `fetch`, and says which provider delivered and which attempts failed."""
        check_hash(blob)
        limit = self.policy.max_size if max_size is None else max_size
        if limit < 0:
            raise ValueError("max_size must be >= 0")
        if expected_size is not None and not 0 <= expected_size <= limit:
            raise ValueError("expected_size must be within 0..max_size")
        lane = 0
        if background and self.policy.parts(expected_size) is None:
            lane, self._next_lane = self._next_lane, (self._next_lane + 1) % self.policy.lanes
        if min_rate is not None and min_rate <= 0:
            raise ValueError("min_rate must be positive")
        terms = _Terms(limit, expected_size, progress, background, lane, min_rate)
        for peer in providers:
            if not isinstance(peer, PeerAddress):
                raise TypeError("providers are PeerAddress values")
        if self.store is not None:
            held = self.store.get(blob)
            if held is not None:
                return Fetched(held, self.transport.node_id)
        task = self._inflight.get(blob)
        if task is None:  # one network fetch per blob, however many callers want it
            task = asyncio.create_task(self._fetch_limited(blob, providers, terms))
            self._inflight[blob] = task
            task.add_done_callback(lambda t: self._settled(blob, t))
            result = await asyncio.shield(task)
        else:
            result = await self._join(task, blob, providers, terms)
        if self.store is not None and round is not None:
            self.store.put_verified(blob, result.data, round)
        return result

    def _settled(self, blob: bytes, task: asyncio.Task[Fetched]) -> None:
        self._inflight.pop(blob, None)
        if not task.cancelled():
            task.exception()  # retrieved: a caller that gave up (cancelled) leaves no "never retrieved" noise

    async def _join(
        self,
        task: asyncio.Task[Fetched],
        blob: bytes,
        providers: Sequence[PeerAddress],
        terms: _Terms,
    ) -> Fetched:
        """Wait for another caller's fetch of `blob`, on this caller's terms."""
        try:
            result = await asyncio.shield(task)
        except BlobFetchError:  # its providers failed; ours may not
            return await self._fetch_limited(blob, providers, terms)
        if len(result.data) > terms.limit:
            attempt = Attempt(
                result.provider, f"{len(result.data)} bytes, more than the {terms.limit} allowed"
            )
            raise BlobFetchError(blob, [attempt])
        return result

    async def close(self) -> None:
        """Cancel fetches still running (their callers have gone)."""
        tasks = list(self._inflight.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _fetch_limited(
        self, blob: bytes, providers: Sequence[PeerAddress], terms: _Terms
    ) -> Fetched:
        if terms.background:
            async with self._background_slots, self._slots:
                return await self._fetch_any(blob, providers, terms)
        async with self._slots:
            return await self._fetch_any(blob, providers, terms)

    async def _fetch_any(
        self, blob: bytes, providers: Sequence[PeerAddress], terms: _Terms
    ) -> Fetched:
        attempts: list[Attempt] = []
        seen: set[NodeId] = {self.transport.node_id}
        queue: list[PeerAddress] = []
        for peer in providers:  # each node once, at its first place
            if peer.node_id not in seen:
                seen.add(peer.node_id)
                queue.append(peer)
        queue.reverse()  # popped from the end: the caller's order
        loop = asyncio.get_running_loop()
        running: dict[asyncio.Task[bytes], tuple[PeerAddress, _Received]] = {}
        try:
            while queue or running:
                now = loop.time()
                on_pace = running and all(r.on_pace(self.policy, now) for _, r in running.values())
                if queue and len(running) < self.policy.max_parallel and not on_pace:
                    peer, received = queue.pop(), _Received(terms.progress, now)
                    running[asyncio.create_task(self._fetch_from(peer, blob, terms, received))] = (
                        peer,
                        received,
                    )
                # looked at four times per hedge time: a streaming provider may fall behind at any moment
                hedge = self.policy.hedge_after / 4 if queue else None
                done, _ = await asyncio.wait(
                    running, timeout=hedge, return_when=asyncio.FIRST_COMPLETED
                )
                for task in done:
                    peer, _ = running.pop(task)
                    try:
                        data = task.result()
                    except (TransportError, _BadProvider) as e:
                        log.info("blob %s from %r failed: %s", blob.hex()[:16], peer.node_id, e)
                        status = e.status if isinstance(e, RemoteError) else None
                        attempts.append(Attempt(peer.node_id, f"{type(e).__name__}: {e}", status))
                        continue
                    self.bytes_fetched += len(data)
                    return Fetched(data, peer.node_id, tuple(attempts))
            raise BlobFetchError(blob, attempts)
        finally:
            for task in running:
                task.cancel()
            if running:
                await asyncio.gather(*running, return_exceptions=True)

    async def _fetch_from(
        self, peer: PeerAddress, blob: bytes, terms: _Terms, received: _Received
    ) -> bytes:
        parts = self.policy.parts(terms.expected)
        if parts is None:
            hasher = hashlib.sha256()  # hashed as it arrives, while the next chunk is in flight
            _, data = await self._fetch_part(peer, blob, None, terms.lane, terms, received, hasher)
            digest = hasher.digest()
        else:
            tasks = [
                asyncio.create_task(self._fetch_part(peer, blob, part, lane, terms, received, None))
                for lane, part in enumerate(parts)
            ]
            try:
                replies = await asyncio.gather(*tasks)
            finally:  # one part failed: the provider failed, its other parts are not waited for
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
            sizes = {size for size, _ in replies}
            data = b"".join(chunk for _, chunk in replies)
            if len(sizes) != 1:
                raise _BadProvider(f"its parts disagree on the blob's length ({sorted(sizes)})")
            if len(data) != next(iter(sizes)):
                raise _BadProvider(
                    f"a blob of {next(iter(sizes))} bytes, not the {terms.expected} expected"
                )
            digest = hashlib.sha256(data).digest()
        if digest != blob:
            raise _BadProvider("bytes do not match the blob hash")
        return data

    async def _fetch_part(
        self,
        peer: PeerAddress,
        blob: bytes,
        part: tuple[int, int] | None,
        lane: int,
        terms: _Terms,
        received: _Received,
        hasher,
    ) -> tuple[int, bytes]:
        """(the blob's size, the bytes of `part`, or of all of it if None) from one request."""
        policy = self.policy
        loop = asyncio.get_running_loop()
        request = blob if part is None else part_request(blob, *part)
        async with self.transport.request(
            peer, BLOB_PROTOCOL, request, open_timeout=policy.open_timeout, lane=lane
        ) as reply:
            deadline = loop.time() + policy.deadline_slack  # until the size is known
            mark = self.transport.liveness(peer.node_id)
            got = want = 0
            try:
                header = await self._read_exactly(reply, LENGTH_PREFIX.size, deadline)
                (size,) = LENGTH_PREFIX.unpack(header)
                if size > terms.limit:
                    raise _BadProvider(
                        f"announces {size} bytes, more than the {terms.limit} allowed"
                    )
                received.size = size  # parts that disagree are refused at the end
                start, length = part if part is not None else (0, size)
                want = max(0, min(size, start + length) - min(size, start))
                deadline = loop.time() + terms.body_deadline(policy, want)
                chunks: list[bytes] = []
                while got < want:
                    chunk = await self._read_chunk(reply, min(READ_CHUNK, want - got), deadline)
                    if not chunk:
                        raise _BadProvider(f"reply ended after {got} of {want} bytes")
                    if hasher is not None:
                        hasher.update(chunk)
                    chunks.append(chunk)
                    got += len(chunk)
                    mark = self.transport.liveness(peer.node_id)  # a stall is counted from here
                    received.add(len(chunk), size)
                if await self._read_chunk(reply, 1, deadline):
                    raise _BadProvider("reply longer than its length prefix")
            except TimeoutError:
                await self.transport.stalled(peer.node_id, mark)
                if loop.time() < deadline:
                    raise _BadProvider(
                        f"stalled: no bytes for {policy.progress_timeout:g} s"
                    ) from None
                raise _BadProvider(
                    f"too slow: {got} of {want} bytes by the deadline"
                    f" ({terms.min_rate or policy.min_rate:g} B/s minimum)"
                ) from None
        return size, b"".join(chunks)

    async def _read_chunk(self, reply: Reply, max_bytes: int, deadline: float) -> bytes:
        """One read, within the progress timeout and the attempt's deadline (TimeoutError)."""
        left = deadline - asyncio.get_running_loop().time()
        if left <= 0:
            raise TimeoutError
        async with asyncio.timeout(min(self.policy.progress_timeout, left)):
            return await reply.read(max_bytes)

    async def _read_exactly(self, reply: Reply, n: int, deadline: float) -> bytes:
        out = b""
        while len(out) < n:
            chunk = await self._read_chunk(reply, n - len(out), deadline)
            if not chunk:
                raise _BadProvider(f"reply ended inside its {n}-byte header")
            out += chunk
        return out
