"""What the blob server has served each peer of each blob: the ground for refusing a peer more.

A peer's requests for one blob are one account. Every request, whole or a part, is charged the bytes it
asks for, and at least one lane's share of the blob (`size / lanes`, what an honest striped fetch asks per
part), so neither tiny parts nor parts past offset 0 are free. Per peer and blob:
  * at most `lanes` requests at once (an honest fetch asks one part per lane);
  * at most `copies` copies' worth of bytes charged at once, requests in flight counted at what they ask
    for and ended ones at what they cost (the bytes sent, or the share), one copy's worth drained every
    `refetch_every` seconds: room for a fetch retried after a failure, and for a blob asked again once per
    check or round (equal state parts recur across steps, and a verifier checks them again), never a
    re-download at the line's rate;
  * a blob under a copy limit (`CopyLimit`, our own result) is served to its first `first` peers: a peer
    holds a place while it has a request in flight, and keeps it only once it was sent every byte of the
    blob (a copy delivered in full, over one request or several). So a peer holds one place however many
    requests it makes, and a request for one byte holds none once answered. The parts of one copy come on
    separate connections, not all at once: a peer that had a request within `linger` seconds is let
    through past the limit (it had a place a moment ago; the limit is about our upload, which the bytes
    caps bound anyway).

Memory: one account per (blob held, peer on the allowlist); books of blobs no source holds any more, and
idle expired accounts, are dropped whenever the table has doubled since the last sweep.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from .blob_store import CopyLimit
from .identity import NodeId
from .transport import MAX_LANES

COPIES_PER_PEER = 3  # a part a check asks for is tried three times (runtime PART_TRIES)
REFETCH_EVERY = (
    1.0  # seconds in which one copy's worth of charges drains (a check's part retry waits 1 s)
)
LINGER = (
    1.0  # seconds after a request in which the next part of its copy is let through past the limit
)
FORGET_AFTER = (
    600.0  # seconds after which an idle account is forgotten (and its place, long after patience)
)
SWEEP_AT = 1024  # books (blobs) in the table before the first sweep


@dataclass(slots=True)
class _Account:
    active: int = 0  # requests in flight
    reserved: int = 0  # bytes those requests ask for
    charged: float = 0.0  # what ended requests cost, less what drained since
    drained: float = 0.0  # when `charged` was last drained
    copies: int = 0  # copies delivered in full
    sent: list[tuple[int, int]] = field(
        default_factory=list
    )  # [start, end) ranges sent of the next copy
    last: float = 0.0  # when a request last began or ended

    def drain(self, now: float, per_second: float) -> None:
        self.charged = max(0.0, self.charged - (now - self.drained) * per_second)
        self.drained = now

    def holds_place(self) -> bool:
        return self.active > 0 or self.copies > 0

    def add(self, start: int, end: int, size: int) -> int:
        """Bytes [start, end) were sent; returns the copies that completed (0 or 1). The ranges are at most
        one per request granted, and those are bounded by the charges."""
        if end <= start:
            return 0
        merged: list[tuple[int, int]] = []
        for a, b in sorted([*self.sent, (start, end)]):
            if merged and a <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], b))
            else:
                merged.append((a, b))
        if merged == [(0, size)]:
            self.copies, self.sent = self.copies + 1, []
            return 1
        self.sent = merged
        return 0


@dataclass(frozen=True, slots=True)
class Grant:
    """One request let through: end it with `Uploads.end`."""

    blob: bytes
    peer: NodeId
    size: int
    start: int
    cost: int  # reserved for it while it runs
    floor: int  # what it costs at least


class Uploads:
    def __init__(self, copies: int = COPIES_PER_PEER, lanes: int = MAX_LANES, refetch_every: float = REFETCH_EVERY,
                 linger: float = LINGER, forget_after: float = FORGET_AFTER) -> None:  # fmt: skip
        if copies < 1 or lanes < 1 or refetch_every <= 0 or linger < 0 or forget_after <= 0:
            raise ValueError(
                "copies and lanes must be >= 1, refetch_every and forget_after > 0, linger >= 0"
            )
        self.copies, self.lanes, self.linger, self.forget_after = (
            copies,
            lanes,
            linger,
            forget_after,
        )
        self.refetch_every = refetch_every
        self._books: dict[bytes, dict[NodeId, _Account]] = {}
        self._sweep_at = SWEEP_AT

    def begin(self, blob: bytes, peer: NodeId, size: int, start: int, length: int, limit: CopyLimit | None,
              now: float, held: Callable[[bytes], bool]) -> Grant | str:  # fmt: skip
        """A grant for `length` bytes from `start` of `blob` (of `size` bytes) to `peer` at `now`, or why not.
        `held` says whether a blob is still served (for the sweep)."""
        if len(self._books) >= self._sweep_at:
            self._sweep(now, held)
        book = self._books.get(blob, {})
        account = book.get(peer)
        if account is not None and account.active == 0 and now - account.last >= self.forget_after:
            account = None
        if account is None:
            account = _Account(last=float("-inf"), drained=now)  # holds no place until granted
        if account.active >= self.lanes:
            return f"{self.lanes} requests for {blob.hex()[:16]} under way already"
        floor = max(1, -(-size // self.lanes))
        cost = max(length, floor)
        copy = max(size, self.lanes)
        account.drain(now, copy / self.refetch_every)
        if account.charged + account.reserved + cost > self.copies * copy:
            return f"sent you {self.copies} copies' worth of {blob.hex()[:16]} already: ask its other holders"
        lingers = now - account.last < self.linger  # the next part of a copy begun a moment ago
        if limit is not None and not limit.open(now) and not account.holds_place() and not lingers:
            places = sum(a.holds_place() for a in book.values())
            if places >= limit.first:
                return f"served enough copies of {blob.hex()[:16]}: ask its other holders"
        account.active += 1
        account.reserved += cost
        account.last = now
        self._books.setdefault(blob, book)[peer] = account
        return Grant(blob, peer, size, start, cost, floor)

    def end(self, grant: Grant, sent: int, now: float) -> int:
        """`grant`'s request is over, having sent its first `sent` bytes; returns the copies it completed (0
        or 1)."""
        account = self._books.get(grant.blob, {}).get(grant.peer)
        if account is None:  # swept meanwhile: impossible while it is active, but cheap to survive
            return 0
        account.active -= 1
        account.reserved -= grant.cost
        account.drain(now, max(grant.size, self.lanes) / self.refetch_every)
        account.charged += max(sent, grant.floor)
        account.last = now
        return account.add(grant.start, grant.start + sent, grant.size)

    def _sweep(self, now: float, held: Callable[[bytes], bool]) -> None:
        for blob in list(self._books):
            book = self._books[blob]
            if not held(blob):
                book = {p: a for p, a in book.items() if a.active}  # only requests under way stay
            for peer in [
                p for p, a in book.items() if not a.active and now - a.last >= self.forget_after
            ]:
                del book[peer]
            if book:
                self._books[blob] = book
            else:
                del self._books[blob]
        self._sweep_at = max(SWEEP_AT, 2 * len(self._books))

    def __len__(self) -> int:
        """Accounts held (for tests and stats)."""
        return sum(len(book) for book in self._books.values())
