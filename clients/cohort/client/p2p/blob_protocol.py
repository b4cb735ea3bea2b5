"""The blob protocol, serving side: anyone on the allowlist may ask for a blob by hash.

    request  = sha256 of the blob (32 bytes) [| u64 offset | u64 length: a part of it]
    response = u64 big-endian length of the whole blob | the blob's bytes (or the part's, clamped to
               the blob)

The length prefix lets a fetcher refuse an oversized blob before reading it and tell a complete
reply from a cut one. Parts let a fetcher take one blob from a holder over several connections side
by side (see `BlobFetcher`). What each peer is served of each blob is accounted (`uploads.Uploads`):
a copy counts once its bytes were sent in full, and every request, at any offset, is charged.
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Iterable

from .blob_store import HASH_BYTES, BlobReader, BlobSource
from .identity import NodeId
from .transport import READ_CHUNK, ReplyWriter, RequestRejected, Status, Transport
from .uploads import Uploads

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
    """Answers blob requests from a list of sources (searched in order; the list may change). What it
    serves each peer of a blob is bounded (`uploads`): requests at once, bytes in all, and for a blob
    whose source limits its copies (`copy_limit`, our own result), the peers it is served to at first;
    beyond any of them the answer is BUSY, so fetchers go to other holders."""

    def __init__(self, sources: Iterable[BlobSource] = (), min_rate: float = SERVE_MIN_RATE,
                 slack: float = SERVE_SLACK, uploads: Uploads | None = None) -> None:  # fmt: skip
        if min_rate <= 0 or slack <= 0:
            raise ValueError("min_rate and slack must be positive")
        self.sources: list[BlobSource] = list(sources)
        self.min_rate, self.slack = min_rate, slack
        self.uploads = uploads if uploads is not None else Uploads()
        self.abandoned = 0  # replies cut because the reader did not take them in time
        self.bytes_served = 0
        self.busy_refusals = 0
        self.serving: dict[bytes, int] = {}  # blob -> requests being served now
        self.served: dict[bytes, int] = {}  # blob -> copies delivered in full (recent blobs only)

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
        opener = getattr(
            source, "open_reader", None
        )  # a reply holds what it reads: collecting it cuts nothing
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
        start, length = (
            PART.unpack(request[HASH_BYTES:]) if len(request) == MAX_REQUEST else (0, size)
        )
        start = min(start, size)
        end = min(size, start + length)
        # a source that does not say (a shared checkpoint directory) is bulk: rounds' results go first
        background_of = getattr(source, "in_background", None)
        background = background_of(blob) if background_of is not None else True
        limit_of = getattr(source, "copy_limit", None)
        limit = limit_of(blob) if limit_of is not None else None
        grant = self.uploads.begin(blob, peer, size, start, end - start, limit, time.monotonic(),
                                   lambda b: self.find(b) is not None)  # fmt: skip
        if isinstance(grant, str):
            self.busy_refusals += 1
            raise RequestRejected(Status.BUSY, grant)
        self.serving[blob] = self.serving.get(blob, 0) + 1
        sent = 0
        try:
            async with asyncio.timeout(self.slack + (end - start) / self.min_rate):
                if background:
                    await reply.background()
                await reply.write(LENGTH_PREFIX.pack(size))
                for offset in range(start, end, READ_CHUNK):
                    part = min(READ_CHUNK, end - offset)
                    chunk = await (
                        reader.read(offset, part)
                        if reader is not None
                        else source.read_blob(blob, offset, part)
                    )
                    await reply.write(chunk)
                    sent += len(chunk)
                    self.bytes_served += len(chunk)
        except TimeoutError:
            self.abandoned += 1
            raise RequestRejected(
                Status.BUSY, f"reply not taken within {self.slack:g} s at {self.min_rate:g} B/s"
            ) from None
        finally:
            if copies := self.uploads.end(grant, sent, time.monotonic()):
                if (
                    blob not in self.served and len(self.served) >= 4096
                ):  # bounded: only recent blobs are asked about
                    del self.served[next(iter(self.served))]
                self.served[blob] = self.served.get(blob, 0) + copies
            self.serving[blob] -= 1
            if not self.serving[blob]:
                del self.serving[blob]
