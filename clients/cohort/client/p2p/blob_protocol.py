"""The blob protocol, serving side: anyone on the allowlist may ask for a blob by hash.

    request  = sha256 of the blob (32 bytes) [| u64 offset | u64 length: a part of it]
    response = u64 big-endian length of the whole blob | the blob's bytes (or the part's, clamped to
               the blob)

The length prefix lets a fetcher refuse an oversized blob before reading it and tell a complete
reply from a cut one. Parts let a fetcher take one blob from a holder over several connections side
by side (see `BlobFetcher`); the part that starts at offset 0 counts as the copy served.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Iterable

from .blob_store import HASH_BYTES, BlobReader, BlobSource
from .identity import NodeId
from .transport import READ_CHUNK, ReplyWriter, RequestRejected, Status, Transport

BLOB_PROTOCOL = "cohort/blob/1"
LENGTH_PREFIX = struct.Struct(">Q")
PART = struct.Struct(">QQ")  # offset, length
MAX_REQUEST = HASH_BYTES + PART.size
# a reader that does not take a reply at this rate (plus the slack) is abandoned, so a fetcher that stops
# reading cannot hold a copy, or a serving task, for ever; half the rate and twice the slack a fetcher
# demands of its providers (FetchPolicy), so no copy a fetcher would accept is cut
SERVE_MIN_RATE = 128 << 10
SERVE_SLACK = 20.0


def part_request(blob: bytes, offset: int, length: int) -> bytes:
    return blob + PART.pack(offset, length)


class BlobServer:
    """Answers blob requests from a list of sources (searched in order; the list may change). A source
    may cap the copies of a blob it serves (`take_upload`); beyond it the answer is BUSY, so fetchers go
    to other holders; it is told when each counted copy ends (`end_upload`), served or abandoned."""

    def __init__(self, sources: Iterable[BlobSource] = (), min_rate: float = SERVE_MIN_RATE,
                 slack: float = SERVE_SLACK) -> None:  # fmt: skip
        if min_rate <= 0 or slack <= 0:
            raise ValueError("min_rate and slack must be positive")
        self.sources: list[BlobSource] = list(sources)
        self.min_rate, self.slack = min_rate, slack
        self.abandoned = 0  # replies cut because the reader did not take them in time
        self.bytes_served = 0
        self.busy_refusals = 0
        self.serving: dict[bytes, int] = {}  # blob -> copies being served now
        self.served: dict[bytes, int] = {}  # blob -> copies served completely (recent blobs only)
        self._copies: set[tuple[bytes, NodeId]] = set()  # (blob, peer) whose first part was granted

    def register(self, transport: Transport) -> None:
        transport.add_protocol(BLOB_PROTOCOL, self.handle, max_request=MAX_REQUEST)

    def find(self, blob: bytes) -> tuple[BlobSource, int] | None:
        for source in self.sources:
            size = source.blob_size(blob)
            if size is not None:
                return source, size
        return None

    async def handle(self, peer: NodeId, request: bytes, reply: ReplyWriter) -> None:
        if len(request) not in (HASH_BYTES, MAX_REQUEST):
            raise RequestRejected(
                Status.BAD_REQUEST,
                f"a blob request is a {HASH_BYTES}-byte hash, or one and a {PART.size}-byte part",
            )
        blob = request[:HASH_BYTES]
        found = self.find(blob)
        if found is None:
            raise RequestRejected(Status.NOT_FOUND, f"no blob {blob.hex()[:16]}")
        source, size = found
        opener = getattr(source, "open_reader", None)  # a reply holds what it reads: collecting it cuts nothing
        reader = opener(blob) if opener is not None else None
        if opener is not None and reader is None:
            raise RequestRejected(Status.NOT_FOUND, f"no blob {blob.hex()[:16]}")
        try:
            await self._serve(peer, blob, source, size, request, reply, reader)
        finally:
            if reader is not None:
                reader.close()

    async def _serve(self, peer: NodeId, blob: bytes, source: BlobSource, size: int, request: bytes,
                     reply: ReplyWriter, reader: BlobReader | None) -> None:  # fmt: skip
        start, length = PART.unpack(request[HASH_BYTES:]) if len(request) == MAX_REQUEST else (0, size)
        start = min(start, size)
        end = min(size, start + length)
        copy = start == 0  # the first part stands for the copy: caps and counts see one per fetch
        take = getattr(source, "take_upload", None)
        # past the cap, later parts are refused too, except to a peer whose copy (first part) was granted
        later_part_of_a_copy = not copy and (blob, peer) in self._copies
        if take is not None and not later_part_of_a_copy and not take(blob, count=copy):
            self.busy_refusals += 1
            raise RequestRejected(Status.BUSY, f"served enough copies of {blob.hex()[:16]}: ask its other holders")
        finish = getattr(source, "end_upload", None) if take is not None and copy else None
        if copy:
            if len(self._copies) > 4096:  # bounded: only copies under way matter
                self._copies.clear()
            self._copies.add((blob, peer))
        self.serving[blob] = self.serving.get(blob, 0) + 1
        complete = False
        try:
            async with asyncio.timeout(self.slack + (end - start) / self.min_rate):
                await reply.write(LENGTH_PREFIX.pack(size))
                for offset in range(start, end, READ_CHUNK):
                    part = min(READ_CHUNK, end - offset)
                    chunk = await (reader.read(offset, part) if reader is not None else source.read_blob(blob, offset, part))
                    await reply.write(chunk)
                    self.bytes_served += len(chunk)
            complete = True
            if copy:
                if len(self.served) > 4096:  # bounded: only recent blobs are asked about
                    self.served.clear()
                self.served[blob] = self.served.get(blob, 0) + 1
        except TimeoutError:
            self.abandoned += 1
            raise RequestRejected(Status.BUSY, f"reply not taken within {self.slack:g} s at {self.min_rate:g} B/s") from None
        finally:
            if finish is not None:
                finish(blob, complete)
            self.serving[blob] -= 1
            if not self.serving[blob]:
                del self.serving[blob]
