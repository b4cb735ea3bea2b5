"""The blob protocol, serving side: anyone on the allowlist may ask for a blob by hash.

    request  = sha256 of the blob (32 bytes)
    response = u64 big-endian length | the blob's bytes

The length prefix lets a fetcher refuse an oversized blob before reading it and tell a complete
reply from a cut one.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from .blob_store import HASH_BYTES, BlobSource
from .identity import NodeId
from .transport import READ_CHUNK, ReplyWriter, RequestRejected, Status, Transport

BLOB_PROTOCOL = "cohort/blob/1"
LENGTH_PREFIX = struct.Struct(">Q")


class BlobServer:
    """Answers blob requests from a list of sources (searched in order; the list may change). A source
    may cap the copies of a blob it serves (`take_upload`); beyond it the answer is BUSY, so fetchers go
    to other holders."""

    def __init__(self, sources: Iterable[BlobSource] = ()) -> None:
        self.sources: list[BlobSource] = list(sources)
        self.bytes_served = 0
        self.busy_refusals = 0
        self.serving: dict[bytes, int] = {}  # blob -> copies being served now
        self.served: dict[bytes, int] = {}  # blob -> copies served completely (recent blobs only)

    def register(self, transport: Transport) -> None:
        transport.add_protocol(BLOB_PROTOCOL, self.handle, max_request=HASH_BYTES)

    def find(self, blob: bytes) -> tuple[BlobSource, int] | None:
        for source in self.sources:
            size = source.blob_size(blob)
            if size is not None:
                return source, size
        return None

    async def handle(self, peer: NodeId, request: bytes, reply: ReplyWriter) -> None:
        if len(request) != HASH_BYTES:
            raise RequestRejected(Status.BAD_REQUEST, f"a blob request is a {HASH_BYTES}-byte hash")
        found = self.find(request)
        if found is None:
            raise RequestRejected(Status.NOT_FOUND, f"no blob {request.hex()[:16]}")
        source, size = found
        take = getattr(source, "take_upload", None)
        if take is not None and not take(request):
            self.busy_refusals += 1
            raise RequestRejected(Status.BUSY, f"served enough copies of {request.hex()[:16]}: ask its other holders")
        self.serving[request] = self.serving.get(request, 0) + 1
        try:
            await reply.write(LENGTH_PREFIX.pack(size))
            for offset in range(0, size, READ_CHUNK):
                chunk = await source.read_blob(request, offset, min(READ_CHUNK, size - offset))
                await reply.write(chunk)
                self.bytes_served += len(chunk)
            if len(self.served) > 4096:  # bounded: only recent blobs are asked about
                self.served.clear()
            self.served[request] = self.served.get(request, 0) + 1
        finally:
            self.serving[request] -= 1
            if not self.serving[request]:
                del self.serving[request]
