"""A directory of files committed part by part (a member's committed optimizer state): its manifest and every
part served by range from disk, the directory removed once its round is collected, nothing read whole."""

import asyncio
import hashlib
import shutil
import time

from cohort.client.p2p import blob_store
from cohort.client.p2p.blob_store import BlobStore
from cohort.client.p2p.manifest import Manifest

PART = 4096


def _directory(root, files: dict[str, bytes]) -> Manifest:
    root.mkdir()
    for name, data in files.items():
        (root / name).write_bytes(data)
    return Manifest.of_directory(root, PART)


def test_a_directory_is_served_part_by_part_and_removed_with_its_round(tmp_path):
    data = b"".join(hashlib.sha256(bytes([i])).digest() for i in range(256)) + bytes(
        2048
    )  # parts 4096, 4096, 2048
    manifest = _directory(tmp_path / "s", {"a.bin": data, "b.bin": b"tail"})
    store = BlobStore()
    h = store.put_directory(tmp_path / "s", manifest, round=5)
    assert h == manifest.hash() and store.get(h) == manifest.encode()
    third = manifest.files[0].chunks[2]
    assert store.blob_size(third) == 2048 and store.get(third) == data[8192:]
    assert asyncio.run(store.read_blob(third, 100, 300)) == data[8292:8592]
    assert store.get(hashlib.sha256(b"tail").digest()) == b"tail"
    assert store.gc(5) == 0 and (tmp_path / "s").exists()
    assert store.gc(6) == 5 and not (tmp_path / "s").exists() and store.blob_size(third) is None


def test_a_part_held_already_is_served_from_the_newest_directory_that_holds_it(tmp_path):
    """Equal parts recur (zero momentum of tokens never seen): the newest directory serves them, so pruning an
    older one (its owner keeps a fixed number of steps) never takes a part a newer state still needs."""
    same = b"x" * PART
    first = _directory(tmp_path / "one", {"a.bin": same, "b.bin": b"old"})
    second = _directory(tmp_path / "two", {"a.bin": same, "b.bin": b"new"})
    store = BlobStore()
    store.put_directory(tmp_path / "one", first, round=1)
    store.put_directory(tmp_path / "two", second, round=2)
    part = hashlib.sha256(same).digest()
    shutil.rmtree(tmp_path / "one")  # its owner pruned it
    assert store.get(part) == same
    assert store.gc(2) == 2  # the first manifest and its own part
    assert store.gc(3) == 3 and not (tmp_path / "two").exists()


REAL_CLOCK = time.monotonic


def later(monkeypatch, seconds: float) -> None:
    """The store's clock, `seconds` on from now."""
    now = REAL_CLOCK() + seconds
    monkeypatch.setattr(blob_store.time, "monotonic", lambda: now)


def test_a_reply_keeps_reading_what_it_opened_after_its_round_is_collected(tmp_path, monkeypatch):
    """The race of a verifier downloading a trainer's state while its round is collected (its hold over):
    the reply reads from the file it opened, and a blob collected before a reply begins is simply not there."""
    data = b"".join(hashlib.sha256(bytes([i])).digest() for i in range(256))
    manifest = _directory(tmp_path / "s", {"a.bin": data})
    store = BlobStore()
    store.put_directory(tmp_path / "s", manifest, round=1)
    part = manifest.files[0].chunks[1]
    reader = store.open_reader(part)
    assert reader is not None
    later(monkeypatch, blob_store.HOLD_SECONDS + 1)
    assert store.gc(2) == 3 and not (tmp_path / "s").exists()
    assert asyncio.run(reader.read(10, 20)) == data[PART + 10 : PART + 30]
    reader.close()
    assert store.open_reader(part) is None


def test_a_directory_being_read_outlives_its_round_a_while(tmp_path, monkeypatch):
    """A check fetches a state's parts one after another over a slow link, for longer than its round lives: a
    read (of its manifest or a part) keeps the directory HOLD_SECONDS past the last read, and no more than
    MAX_HELD directories at once (a peer reading every state we serve keeps only that many on our disk)."""
    store = BlobStore()
    count = blob_store.MAX_HELD + 2
    manifests = [
        _directory(tmp_path / f"s{i}", {"a.bin": hashlib.sha256(bytes([i])).digest() * 200})
        for i in range(count)
    ]
    hashes = [store.put_directory(tmp_path / f"s{i}", m, round=1) for i, m in enumerate(manifests)]
    store.open_reader(hashes[0]).close()  # its manifest
    for m in manifests[1:]:
        store.open_reader(m.files[0].chunks[0]).close()  # a part
    blobs = 3  # each directory's manifest and two parts
    # held: the MAX_HELD read last; the two read first went with their round
    assert store.gc(2) == 2 * blobs
    kept = [i for i in range(count) if (tmp_path / f"s{i}").exists()]
    assert kept == list(range(2, count))
    later(monkeypatch, blob_store.HOLD_SECONDS - 1)
    assert store.gc(2) == 0 and len(kept) == blob_store.MAX_HELD
    store.open_reader(manifests[-1].files[0].chunks[1]).close()  # still being fetched
    later(monkeypatch, blob_store.HOLD_SECONDS + 1)
    assert (
        store.gc(2) == blobs * (blob_store.MAX_HELD - 1) and (tmp_path / f"s{count - 1}").exists()
    )
    later(monkeypatch, 2 * blob_store.HOLD_SECONDS + 1)
    assert store.gc(2) == blobs and not any(tmp_path.glob("s*"))


def test_a_released_directory_goes_at_the_next_gc_but_what_others_still_list_or_a_reader_holds(
    tmp_path,
):
    """A trainer's committed state no check can read any more is released: the next gc removes it whatever
    its round, but not a part another served directory lists (an equal part: zero momentum) nor a directory a
    check is reading right now; releasing twice, or a hash that is no directory, does nothing."""
    same = b"z" * PART
    first = _directory(tmp_path / "one", {"a.bin": same, "b.bin": b"one"})
    second = _directory(tmp_path / "two", {"a.bin": b"two" * 2000, "b.bin": same})
    third = _directory(tmp_path / "three", {"a.bin": b"three" * 1000})
    store = BlobStore()
    h1 = store.put_directory(tmp_path / "one", first, round=10)
    h2 = store.put_directory(tmp_path / "two", second, round=11)  # now serves the shared part
    h3 = store.put_directory(tmp_path / "three", third, round=12)
    store.release_directory(h2)
    store.release_directory(h2)
    store.release_directory(hashlib.sha256(b"not a directory").digest())
    shared = hashlib.sha256(same).digest()
    # the second's manifest and its own parts go; the shared part stays (the first lists it), and with it
    # the second's directory, which holds its file
    assert store.gc(0) == 3 and store.get(shared) == same and store.get(h2) is None
    assert (tmp_path / "two" / "b.bin").exists() and store.get(h1) == first.encode()
    store.open_reader(h3).close()  # a check is reading the third
    store.release_directory(h3)
    assert store.gc(0) == 0 and store.get(h3) == third.encode()
    assert store.gc(12) == 3 and not (tmp_path / "one").exists() and not (tmp_path / "two").exists()
