"""A TCP data server (`cohort data serve`) and the provider that queries it by batch id.

Wire: the client sends one JSON line (at most 1 KiB) per request and reads one reply:

    {"op": "info"}                                  -> JSON {"vocab_size", "n_tokens", "heldout_fraction"}
    {"op": "batch", "start": s, "end": e, "seq_len": L, "split": "train", "seed": 0}
                                                    -> u32 rows, u32 cols, rows*cols u32 LE tokens
    reply = u8 status (0 ok, 1 error) + u32 payload length + payload (error: a UTF-8 message)

The server maps batch ids with the same SequenceLayout as every other provider, so it hands out
the tokens a local reader of the same directory would. A malformed request gets an error reply and
the server keeps serving (a request line over the limit also closes that connection).
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import struct
import threading
import time
from dataclasses import dataclass

import numpy as np
import torch

from .batch import BatchId
from .layout import SPLITS, SequenceLayout, Split
from .provider import TokenSequences, TokenSource
from .shards import DataError

log = logging.getLogger(__name__)

MAX_REQUEST = 1024
MAX_REPLY_TOKENS = 1 << 26
HEADER = struct.Struct("<BI")
SHAPE = struct.Struct("<II")
OK, ERROR = 0, 1


class DataServer:
    """Serves one token source over TCP; run it with `async with` or `serve_forever`."""

    def __init__(
        self,
        source: TokenSource,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        max_connections: int = 256,
        idle_timeout: float = 120.0,
    ) -> None:
        self.source = source
        self.host, self.port = host, port
        self.max_connections = max_connections
        self.idle_timeout = idle_timeout
        self._providers: dict[tuple[int, str, int], TokenSequences] = {}
        self._connections = 0
        self._server: asyncio.Server | None = None
        self.errors = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._handle, self.host, self.port, limit=MAX_REQUEST
        )
        self.port = self._server.sockets[0].getsockname()[1]

    @property
    def location(self) -> str:
        return f"tcp://{self.host}:{self.port}"

    async def serve_forever(self) -> None:
        if self._server is None:
            await self.start()
        await self._server.serve_forever()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def __aenter__(self) -> DataServer:
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._connections >= self.max_connections:
            writer.close()
            return
        self._connections += 1
        try:
            while True:
                try:
                    line = await asyncio.wait_for(reader.readline(), self.idle_timeout)
                except (asyncio.LimitOverrunError, ValueError):
                    await self._send(
                        writer, ERROR, f"request longer than {MAX_REQUEST} bytes".encode()
                    )
                    return
                if not line:
                    return
                status, payload = await self._answer(line)
                await self._send(writer, status, payload)
        except (TimeoutError, ConnectionError):
            return
        finally:
            self._connections -= 1
            writer.close()

    async def _send(self, writer: asyncio.StreamWriter, status: int, payload: bytes) -> None:
        if status == ERROR:
            self.errors += 1
        writer.write(HEADER.pack(status, len(payload)) + payload)
        await writer.drain()

    async def _answer(self, line: bytes) -> tuple[int, bytes]:
        try:
            request = parse_request(line)
            if request is None:
                info = {
                    "vocab_size": self.source.vocab_size,
                    "n_tokens": self.source.n_tokens,
                    "heldout_fraction": self.source.heldout_fraction,
                }
                return OK, json.dumps(info).encode()
            tokens = await asyncio.to_thread(self._tokens, request)
        except (ValueError, DataError) as e:
            return ERROR, str(e).encode()[:4096]
        except Exception as e:  # a bug must not take the server down
            log.exception("data request failed")
            return ERROR, f"internal error: {type(e).__name__}".encode()
        return OK, SHAPE.pack(*tokens.shape) + tokens.astype("<u4").tobytes()

    def _tokens(self, request: BatchRequest) -> np.ndarray:
        key = (request.seq_len, request.split, request.seed)
        provider = self._providers.get(key)
        if provider is None:
            if len(self._providers) >= 16:
                self._providers.clear()  # bounded: a few layouts at a time
            provider = TokenSequences(
                self.source, request.seq_len, split=request.split, seed=request.seed
            )
            self._providers[key] = provider
        return provider.sequences(request.batch).numpy()


@dataclass(frozen=True)
class BatchRequest:
    batch: BatchId
    seq_len: int
    split: Split
    seed: int


def parse_request(line: bytes) -> BatchRequest | None:
    """A batch request, or None for an info request; ValueError says what is wrong."""
    try:
        doc = json.loads(line)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ValueError("request is not a JSON line") from None
    if not isinstance(doc, dict) or doc.get("op") not in ("info", "batch"):
        raise ValueError('request must be an object with "op": "info" or "batch"')
    if doc["op"] == "info":
        return None
    fields = {"start", "end", "seq_len", "split", "seed", "op"}
    if set(doc) != fields:
        raise ValueError(f"a batch request has exactly the keys {sorted(fields)}")
    ints = [doc[k] for k in ("start", "end", "seq_len", "seed")]
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in ints):
        raise ValueError("start, end, seq_len and seed are integers")
    if doc["split"] not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}")
    batch = BatchId(doc["start"], doc["end"])
    if not 2 <= doc["seq_len"] or len(batch) * doc["seq_len"] > MAX_REPLY_TOKENS:
        raise ValueError(f"seq_len must be >= 2 and a reply at most {MAX_REPLY_TOKENS} tokens")
    if not 0 <= doc["seed"] < 1 << 63:
        raise ValueError("seed must be in [0, 2**63)")
    return BatchRequest(batch, doc["seq_len"], doc["split"], doc["seed"])


class TcpDataProvider:
    """A DataProvider asking a data server; one connection, re-opened after a failure."""

    def __init__(
        self,
        host: str,
        port: int,
        seq_len: int,
        *,
        split: Split = "train",
        seed: int = 0,
        timeout: float = 30.0,
        attempts: int = 3,
        backoff: float = 0.25,
    ) -> None:
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        self.host, self.port = host, port
        self.seq_len, self.split, self.seed = seq_len, split, seed
        self.timeout, self.attempts, self.backoff = timeout, attempts, backoff
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        info = json.loads(self._request({"op": "info"}))
        self.vocab_size = int(info["vocab_size"])
        self._layout = SequenceLayout(  # the server's layout, for num_sequences
            int(info["n_tokens"]), seq_len, float(info["heldout_fraction"])
        )

    @property
    def num_sequences(self) -> int:
        return self._layout.size(self.split)

    def sequences(self, batch: BatchId) -> torch.Tensor:
        payload = self._request(
            {
                "op": "batch",
                "start": batch.start,
                "end": batch.end,
                "seq_len": self.seq_len,
                "split": self.split,
                "seed": self.seed,
            }
        )
        rows, cols = SHAPE.unpack_from(payload)
        if (rows, cols) != (len(batch), self.seq_len) or len(
            payload
        ) != SHAPE.size + rows * cols * 4:
            raise DataError(f"{self.host}:{self.port}: reply of the wrong shape")
        tokens = np.frombuffer(payload, dtype="<u4", offset=SHAPE.size).reshape(rows, cols)
        return torch.from_numpy(tokens.astype(np.int64))

    def close(self) -> None:
        with self._lock:
            self._drop()

    def _request(self, doc: dict) -> bytes:
        line = json.dumps(doc).encode() + b"\n"
        last = ""
        with self._lock:
            for attempt in range(self.attempts):
                if attempt:
                    time.sleep(self.backoff * 2 ** (attempt - 1))
                try:
                    if self._sock is None:
                        self._sock = socket.create_connection(
                            (self.host, self.port), timeout=self.timeout
                        )
                    self._sock.sendall(line)
                    status, size = HEADER.unpack(self._recv(HEADER.size))
                    if size > SHAPE.size + MAX_REPLY_TOKENS * 4:
                        raise DataError(
                            f"{self.host}:{self.port}: reply of {size} bytes is too large"
                        )
                    payload = self._recv(size)
                except OSError as e:
                    self._drop()
                    last = f"{type(e).__name__}: {e}"
                    continue
                if status != OK:
                    raise DataError(
                        f"data server {self.host}:{self.port}: {payload.decode(errors='replace')}"
                    )
                return payload
        raise DataError(
            f"data server {self.host}:{self.port}: no answer after {self.attempts} attempts ({last})"
        )

    def _recv(self, n: int) -> bytes:
        chunks, got = [], 0
        while got < n:
            chunk = self._sock.recv(min(n - got, 1 << 20))
            if not chunk:
                raise ConnectionError("connection closed mid-reply")
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    def _drop(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
