"""Checkpoint directories: manifests, and downloads from several peers verified by manifest hash."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from cohort.client.p2p import BlobFetchError, Manifest, blob_hash

CHUNK = 64 << 10


def make_checkpoint(root):
    (root / "tokenizer").mkdir(parents=True)
    (root / "config.json").write_text(json.dumps({"hidden_size": 64, "n_layer": 2}))
    (root / "model.safetensors").write_bytes(os.urandom(1_500_000))
    (root / "tokenizer" / "tokenizer.json").write_bytes(os.urandom(200_000))
    (root / "empty.txt").write_bytes(b"")
    return root


def test_manifest_of_a_directory(tmp_path):
    root = make_checkpoint(tmp_path / "ckpt")
    m = Manifest.of_directory(root, CHUNK)
    assert [f.name for f in m.files] == [
        "config.json",
        "empty.txt",
        "model.safetensors",
        "tokenizer/tokenizer.json",
    ]
    assert m.total_bytes == sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
    model = m.files[2]
    assert len(model.chunks) == -(-1_500_000 // CHUNK)
    assert model.chunks[0] == blob_hash((root / "model.safetensors").read_bytes()[:CHUNK])
    assert Manifest.decode(m.encode()) == m and m.hash() == blob_hash(m.encode())
    (root / "link").symlink_to(root / "config.json")
    with pytest.raises(ValueError, match="regular files"):
        Manifest.of_directory(root, CHUNK)
    with pytest.raises(ValueError, match="not a directory"):
        Manifest.of_directory(root / "config.json")


def test_manifest_rejects_bad_documents(tmp_path):
    good = json.loads(Manifest.of_directory(make_checkpoint(tmp_path / "c"), CHUNK).encode())

    def encoded(**changes) -> bytes:
        return json.dumps({**good, **changes}, sort_keys=True, separators=(",", ":")).encode()

    def file(name="a", size=1, chunks=("00" * 32,)):
        return {"name": name, "size": size, "chunks": list(chunks)}

    bad = {
        b"not json": "not JSON",
        b"[]": "version",
        encoded(version=2): "version",
        encoded(extra=1): "keys",
        encoded(chunk_size=1): "chunk_size",
        encoded(files=[file(name="../escape")]): "'..'",
        encoded(files=[file(name="/abs")]): "relative",
        encoded(files=[file(name="a//b")]): "empty parts",
        encoded(files=[file(name="a\\b")]): "relative",
        encoded(files=[file(), file()]): "sorted by name and unique",
        encoded(files=[file(name="b"), file(name="a")]): "sorted",
        encoded(files=[file(name="a"), file(name="a/b")]): "both a file and a directory",
        encoded(files=[file(size=-1, chunks=())]): "size",
        encoded(files=[file(size=CHUNK + 1)]): "chunks",
        encoded(files=[file(chunks=("zz",))]): "sha256 hex",
        encoded(files=[{"name": "a"}]): "keys",
        json.dumps(good, sort_keys=True).encode(): "canonical",
    }
    for data, message in bad.items():
        with pytest.raises(ValueError, match=message):
            Manifest.decode(data)


async def test_download_from_three_peers(start_nodes, tmp_path):
    source = make_checkpoint(tmp_path / "source")
    manifest = Manifest.of_directory(source, CHUNK)
    *peers, joiner, latecomer = await start_nodes(5)
    for peer in peers:
        assert await peer.share_directory(source, manifest) == manifest.hash()
    reports = []
    got = await joiner.download_directory(
        manifest.hash(), [p.address for p in peers], tmp_path / "joined", progress=reports.append
    )
    assert got == manifest
    for f in manifest.files:
        assert (tmp_path / "joined" / f.name).read_bytes() == (source / f.name).read_bytes()
    last = reports[-1]
    assert (last.bytes_done, last.parts_done) == (manifest.total_bytes, len(manifest.chunk_refs()))
    assert set(last.bytes_by_peer) == {p.address.node_id for p in peers}  # all three served chunks
    assert not list((tmp_path / "joined").rglob("*.partial"))

    # the joiner now serves what it downloaded
    await latecomer.download_directory(manifest.hash(), [joiner.address], tmp_path / "again")
    assert (tmp_path / "again" / "model.safetensors").read_bytes() == (
        source / "model.safetensors"
    ).read_bytes()


async def test_corrupt_peer_and_untrusted_manifest(start_nodes, tmp_path):
    source = make_checkpoint(tmp_path / "source")
    manifest = Manifest.of_directory(source)  # default chunk size, as a scan makes it
    corrupt = make_checkpoint(tmp_path / "corrupt")
    for f in manifest.files:
        if f.size:
            (corrupt / f.name).write_bytes(
                (source / f.name).read_bytes()[::-1]
            )  # same sizes, wrong bytes
    honest, liar, joiner = await start_nodes(3)
    assert await honest.share_directory(source) == manifest.hash()  # scanned here
    await liar.share_directory(corrupt, manifest)  # claims the real manifest, serves other bytes
    reports = []
    await joiner.download_directory(
        manifest.hash(), [liar.address, honest.address], tmp_path / "ok", progress=reports.append
    )
    assert (tmp_path / "ok" / "model.safetensors").read_bytes() == (
        source / "model.safetensors"
    ).read_bytes()
    assert set(reports[-1].bytes_by_peer) == {honest.address.node_id}

    with pytest.raises(BlobFetchError):  # a manifest nobody holds (or that a peer would forge)
        await joiner.download_directory(
            blob_hash(b"some other manifest"), [honest.address], tmp_path / "no"
        )
    with pytest.raises(FileExistsError):
        await joiner.download_directory(manifest.hash(), [honest.address], tmp_path / "ok")
    with pytest.raises(ValueError, match="no providers"):
        await joiner.download_directory(manifest.hash(), [], tmp_path / "none")


async def test_a_pruned_checkpoint_does_not_answer_for_the_chunks_it_shared_with_the_next(
    start_nodes, tmp_path
):
    old = make_checkpoint(tmp_path / "step-10")
    new = make_checkpoint(tmp_path / "step-20")  # another model file, the same config.json
    server, joiner = await start_nodes(2)
    await server.share_directory(old)
    manifest_hash = await server.share_directory(new)
    shutil.rmtree(old)  # pruned: it was shared first, so it would be asked first for config.json
    await joiner.download_directory(manifest_hash, [server.address], tmp_path / "joined")
    assert (tmp_path / "joined" / "config.json").read_bytes() == (new / "config.json").read_bytes()
    await server.share_directory(new)  # shared again: replaces its share, and the pruned one leaves
    assert [s.root for s in server.blob_server.sources if hasattr(s, "root")] == [new]
