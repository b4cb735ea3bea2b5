"""The same batch ids through every provider give the same tokens; failures are clear errors."""

from __future__ import annotations

import json
import socket
import struct
import sys
import time
from pathlib import Path

import pytest
import torch

from cohort.client.data import (
    BatchId,
    ByteTokenizer,
    DataError,
    TokenDataset,
    TokenSequences,
    kjv_text,
    open_data_location,
)
from cohort.client.data.http_source import HttpShards
from cohort.client.data.shards import directory_manifest
from cohort.client.data.tcp import TcpDataProvider

HERE = Path(__file__).parent

BATCHES = [BatchId(0, 8), BatchId(500, 533), BatchId(17_000, 17_040), BatchId(2**64 - 5, 2**64 - 1)]


def test_builtin_kjv_keeps_the_tokens_of_token_dataset():
    dataset = TokenDataset(ByteTokenizer().encode(kjv_text()), 64)
    provider = open_data_location("kjv", 64)
    for batch in BATCHES[:3]:
        assert torch.equal(provider.sequences(batch), dataset.sequences(batch))
    validation = open_data_location("kjv", 64, split="validation")
    held = validation.sequences(BatchId(0, validation.num_sequences))
    assert torch.equal(held, dataset.heldout)


def test_local_http_and_tcp_give_identical_tokens(kjv_dir, http_url, tcp_location):
    builtin = open_data_location("kjv", 64)
    providers = {
        "local": open_data_location(str(kjv_dir), 64, vocab_size=256),
        "http": open_data_location(http_url, 64, vocab_size=256),
        "tcp": open_data_location(tcp_location, 64, vocab_size=256),
    }
    try:
        for batch in BATCHES:
            expected = builtin.sequences(batch)
            assert expected.shape == (len(batch), 64) and expected.dtype == torch.int64
            for name, provider in providers.items():
                assert torch.equal(provider.sequences(batch), expected), name
            assert provider.num_sequences == builtin.num_sequences
        for split in ("validation",):
            got = [
                open_data_location(loc, 32, split=split, seed=3).sequences(BatchId(3, 9))
                for loc in ("kjv", str(kjv_dir), http_url, tcp_location)
            ]
            assert all(torch.equal(g, got[0]) for g in got)
    finally:
        for provider in providers.values():
            provider.close()


def test_http_pins_the_manifest_hash(kjv_dir, http_url):
    good = directory_manifest(kjv_dir).hash()
    HttpShards(http_url, good).close()
    with pytest.raises(DataError, match="manifest hash"):
        HttpShards(http_url, bytes(32))
    with pytest.raises(DataError, match="HTTP 404"):
        HttpShards(http_url + "-missing")


def test_http_server_dying_mid_run_is_retried_then_a_clear_error(kjv_dir, start_server):
    server = start_server([sys.executable, str(HERE / "static_server.py"), str(kjv_dir.parent)])
    source = HttpShards(
        f"{server.first_line}/{kjv_dir.name}",
        timeout=2.0,
        attempts=3,
        backoff=0.05,
        cache_bytes=2 << 20,
    )
    provider = TokenSequences(source, 64)
    provider.sequences(BatchId(0, 4))
    server.stop()
    before = source.requests
    started = time.monotonic()
    with pytest.raises(DataError, match="no answer after 3 attempts"):
        provider.sequences(BatchId(100, 400))  # needs chunks not in the cache
    assert source.requests - before == 3 and time.monotonic() - started < 10
    provider.close()


def tcp_exchange(sock: socket.socket, payload: bytes) -> tuple[int, bytes]:
    sock.sendall(payload)
    status, size = struct.unpack("<BI", recv_exactly(sock, 5))
    return status, recv_exactly(sock, size)


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        assert chunk, "server closed the connection"
        data += chunk
    return data


def test_tcp_server_answers_malformed_requests_with_errors_and_keeps_serving(tcp_location):
    host, port = tcp_location.removeprefix("tcp://").split(":")
    good = {"op": "batch", "start": 0, "end": 2, "seq_len": 16, "split": "train", "seed": 0}
    bad = [
        b"not json\n",
        b"[1, 2]\n",
        json.dumps({"op": "drop tables"}).encode() + b"\n",
        json.dumps({**good, "start": 5, "end": 5}).encode() + b"\n",
        json.dumps({**good, "end": 2**70}).encode() + b"\n",
        json.dumps({**good, "end": 10**7, "seq_len": 4096}).encode() + b"\n",
        json.dumps({**good, "seq_len": "16"}).encode() + b"\n",
        json.dumps({**good, "split": "test"}).encode() + b"\n",
        json.dumps({**good, "extra": 1}).encode() + b"\n",
        json.dumps({**good, "seq_len": 10**9, "end": 1}).encode() + b"\n",
        b"\xff\xfe\n",
    ]
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        for request in bad:
            status, message = tcp_exchange(sock, request)
            assert status == 1 and message, request
        status, payload = tcp_exchange(sock, json.dumps(good).encode() + b"\n")
        assert status == 0 and struct.unpack_from("<II", payload) == (2, 16)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        status, message = tcp_exchange(sock, b"x" * 5000 + b"\n")
        assert status == 1 and b"longer than" in message
    provider = open_data_location(tcp_location, 16)
    assert torch.equal(
        provider.sequences(BatchId(0, 2)), open_data_location("kjv", 16).sequences(BatchId(0, 2))
    )
    with pytest.raises(DataError, match="data server"):
        provider.sequences(BatchId(0, 10**7))
    provider.close()


def test_unknown_or_bad_locations_are_clear_errors(tmp_path):
    with pytest.raises(DataError, match=r"index\.json"):
        open_data_location(str(tmp_path), 64)
    with pytest.raises(DataError, match="tcp://HOST:PORT"):
        open_data_location("tcp://nowhere", 64)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(DataError, match="no answer"):
        TcpDataProvider("127.0.0.1", port, 64, attempts=2, backoff=0.01, timeout=1)
