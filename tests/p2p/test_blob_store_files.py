"""A blob kept in a file (a member's committed optimizer state): served by range from disk, removed with its
round, and never read whole into memory to be served."""

import asyncio
import hashlib

from cohort.client.p2p.blob_store import BlobStore


def test_a_file_blob_is_served_by_range_and_removed_with_its_round(tmp_path):
    data = bytes(range(256)) * 1000
    path = tmp_path / "state.bin"
    path.write_bytes(data)
    blob = hashlib.sha256(data).digest()
    store = BlobStore()
    store.put_file(blob, path, len(data), round=5)
    assert blob in store and store.blob_size(blob) == len(data) and store.total_bytes == len(data)
    assert asyncio.run(store.read_blob(blob, 1000, 300)) == data[1000:1300]
    assert store.get(blob) == data
    assert store.gc(5) == 0 and path.exists()
    assert store.gc(6) == 1 and not path.exists() and store.blob_size(blob) is None


def test_the_same_blob_in_a_second_file_keeps_one(tmp_path):
    data = b"x" * 100
    blob = hashlib.sha256(data).digest()
    first, second = tmp_path / "a", tmp_path / "b"
    first.write_bytes(data)
    second.write_bytes(data)
    store = BlobStore()
    store.put_file(blob, first, 100, round=1)
    store.put_file(blob, second, 100, round=2)
    assert first.exists() and not second.exists()
    assert store.gc(2) == 0  # the later round is kept
