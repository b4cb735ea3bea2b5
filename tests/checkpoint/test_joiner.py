"""Where joiners get weights: peers (one or all serving corrupt bytes), the hub path, the seed."""

from __future__ import annotations

import shutil
from contextlib import AsyncExitStack

import pytest
import torch
from support.tiny_models import tiny_model

from cohort.client.checkpoint import (
    CheckpointError,
    CheckpointUnavailable,
    FromHub,
    FromPeers,
    FromPeersThenHub,
    FromSeed,
    HubUpload,
    fetch_checkpoint,
    load_checkpoint,
    load_weights,
    save_checkpoint,
)
from cohort.client.checkpoint.hub import copy_verified
from cohort.client.model import parameter_digest
from cohort.client.p2p import Manifest, NodeKey, P2PNode


@pytest.fixture(params=["http", "iroh"])
async def nodes(request):
    """start(n) -> n P2P nodes on 127.0.0.1 that all know each other; closed after the test."""
    make = P2PNode.http if request.param == "http" else P2PNode.iroh
    async with AsyncExitStack() as stack:

        async def start(n: int) -> list[P2PNode]:
            started = [
                await stack.enter_async_context(make(NodeKey.generate(), "ckpt-run"))
                for _ in range(n)
            ]
            for node in started:
                node.set_clients([m.address for m in started])
            return started

        yield start


def corrupt_copy(source, dest):
    """The same files with one byte of the weights flipped."""
    shutil.copytree(source, dest)
    weights = dest / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-100] ^= 0xFF
    weights.write_bytes(bytes(data))
    return dest


async def test_joiner_skips_a_corrupt_peer_and_loads_the_right_weights(nodes, tmp_path, model):
    info = save_checkpoint(model, tmp_path / "saved", run_id="r", step=5, epoch=1)
    bad_dir = corrupt_copy(info.path, tmp_path / "bad")
    good_a, good_b, liar, joiner = await nodes(4)
    await good_a.share_directory(info.path)
    await good_b.share_directory(info.path)
    # the liar announces the right manifest but serves other bytes for the weights
    await liar.share_directory(bad_dir, Manifest.of_directory(info.path))
    providers = (liar.address, good_a.address, good_b.address)

    dest = tmp_path / "joined"
    got = await fetch_checkpoint(FromPeers(joiner, providers), info.manifest_hash, dest)
    assert got == dest
    loaded = load_checkpoint(dest, info.manifest_hash).model
    assert parameter_digest(loaded) == parameter_digest(model)
    # the joiner serves it on: a later joiner can fetch from it alone
    late = tmp_path / "late"
    (second,) = await nodes(1)
    for node in (joiner, second):
        node.set_clients([joiner.address, second.address])
    assert await fetch_checkpoint(FromPeers(second, (joiner.address,)), info.manifest_hash, late)


async def test_all_peers_corrupt_is_a_clear_error_and_only_good_parts_stay(nodes, tmp_path, model):
    info = save_checkpoint(model, tmp_path / "saved", run_id="r", step=5, epoch=1)
    manifest = Manifest.of_directory(info.path)
    liars = await nodes(3)
    joiner = liars.pop()
    for k, liar in enumerate(liars):
        await liar.share_directory(corrupt_copy(info.path, tmp_path / f"bad{k}"), manifest)
    dest = tmp_path / "joined"
    with pytest.raises(CheckpointUnavailable, match="from 2 peers"):
        await fetch_checkpoint(
            FromPeers(joiner, tuple(p.address for p in liars)), info.manifest_hash, dest
        )
    assert not dest.exists()
    # the parts that verified wait for a resume; the weights' part (no peer had it right) is not one
    journal = (tmp_path / ".tmp-fetch-joined.parts").read_text().split()
    refs = manifest.chunk_refs()
    kept = {manifest.files[refs[int(k)].file_index].name for k in journal[1:]}
    assert journal[0] == info.manifest_hash.hex() and "model.safetensors" not in kept
    assert "config.json" in kept
    with pytest.raises(CheckpointUnavailable, match="no peer"):
        await fetch_checkpoint(FromPeers(joiner, ()), info.manifest_hash, dest)

    # P2PHub: no peer delivers, so the hub source (here a local directory) is used
    got = await fetch_checkpoint(
        FromPeersThenHub(FromPeers(joiner, (liars[0].address,)), FromHub(str(info.path))),
        info.manifest_hash,
        dest,
    )
    assert got == info.path
    assert not any(p.name.startswith(".tmp-") for p in tmp_path.iterdir())  # parts dropped


def corrupt_file(directory, name):
    path = directory / name
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


async def test_a_sharded_fetch_resumes_from_other_holders_and_spreads(nodes, tmp_path):
    model = tiny_model()
    info = save_checkpoint(
        model, tmp_path / "saved", run_id="r", step=5, epoch=1, max_shard_bytes=200 << 10
    )
    manifest = Manifest.of_directory(info.path)
    sizes = {f.name: f.size for f in manifest.files}
    shards = sorted(n for n in sizes if n.endswith(".safetensors"))
    assert len(shards) > 3
    # a holder whose copy of one shard went bad: a first fetch from it alone fails on that shard
    bad = shutil.copytree(info.path, tmp_path / "bad")
    corrupt_file(bad, shards[1])
    partial, good_a, good_b, joiner = await nodes(4)
    await partial.share_directory(bad, manifest)
    for good in (good_a, good_b):
        await good.share_directory(info.path)
    dest = tmp_path / "joined"
    with pytest.raises(CheckpointUnavailable):
        await fetch_checkpoint(FromPeers(joiner, (partial.address,)), info.manifest_hash, dest)
    work = tmp_path / ".tmp-fetch-joined"
    assert sorted(p.name for p in work.iterdir()) == sorted(n + ".partial" for n in sizes)
    # a part the journal lists but whose bytes changed on disk since is fetched again, not trusted
    corrupt_file(work, shards[0] + ".partial")

    seen = []
    got = await fetch_checkpoint(
        FromPeers(joiner, (partial.address, good_a.address, good_b.address)),
        info.manifest_hash,
        dest,
        progress=seen.append,
    )
    assert got == dest and not work.exists()
    final = seen[-1]
    refetched = sizes[shards[0]] + sizes[shards[1]]
    assert final.bytes_done == final.bytes_total == manifest.total_bytes
    assert final.bytes_resumed == manifest.total_bytes - refetched
    assert sum(final.bytes_by_peer.values()) == refetched
    other = tiny_model(seed=4)
    load_weights(other, dest, info.manifest_hash)
    assert parameter_digest(other) == parameter_digest(model)

    # a fresh joiner takes parts from both good holders
    (fresh,) = await nodes(1)
    for node in (fresh, good_a, good_b):
        node.set_clients([fresh.address, good_a.address, good_b.address])
    seen.clear()
    providers = (good_a.address, good_b.address)
    fresh_dest = tmp_path / "fresh"
    await fetch_checkpoint(
        FromPeers(fresh, providers), info.manifest_hash, fresh_dest, progress=seen.append
    )
    assert set(seen[-1].bytes_by_peer) == {good_a.address.node_id, good_b.address.node_id}
    assert seen[-1].bytes_resumed == 0 and "100%" in seen[-1].line()


async def test_hub_local_directory_is_verified(tmp_path, model):
    info = save_checkpoint(model, tmp_path / "saved", run_id="r", step=1, epoch=0)
    assert await fetch_checkpoint(FromSeed(), info.manifest_hash, tmp_path / "x") is None
    assert (
        await fetch_checkpoint(FromHub(str(info.path)), info.manifest_hash, tmp_path / "x")
        == info.path
    )
    bad = corrupt_copy(info.path, tmp_path / "bad")
    with pytest.raises(CheckpointUnavailable, match="manifest hash"):
        await fetch_checkpoint(FromHub(str(bad)), info.manifest_hash, tmp_path / "x")
    with pytest.raises(CheckpointUnavailable, match="owner/name"):
        await fetch_checkpoint(
            FromHub("not a repo", revision="main"), info.manifest_hash, tmp_path / "x"
        )


def test_hub_snapshot_copy_follows_symlinks_and_drops_hub_files(tmp_path, model):
    """The shape of a hub cache snapshot: symlinks into a blob folder, plus .gitattributes."""
    info = save_checkpoint(model, tmp_path / "saved", run_id="r", step=1, epoch=0)
    blobs, snap = tmp_path / "blobs", tmp_path / "snapshot"
    blobs.mkdir()
    snap.mkdir()
    for k, f in enumerate(sorted(info.path.iterdir())):
        shutil.copyfile(f, blobs / str(k))
        (snap / f.name).symlink_to(blobs / str(k))
    (snap / ".gitattributes").write_text("*.safetensors filter=lfs\n")
    dest = copy_verified(snap, info.manifest_hash, tmp_path / "dest", skip={".gitattributes"})
    assert not any(p.is_symlink() for p in dest.iterdir())
    assert torch.equal(
        load_checkpoint(dest, info.manifest_hash).model.lm_head.weight, model.lm_head.weight
    )
    with pytest.raises(CheckpointError):
        copy_verified(snap, bytes(32), tmp_path / "dest2")
    assert not (tmp_path / "dest2").exists()


def test_hub_upload_arguments():
    assert HubUpload.from_options(None, {}) is None
    with pytest.raises(CheckpointError, match="HF_TOKEN"):
        HubUpload.from_options("me/ckpt", {})
    with pytest.raises(CheckpointError, match="owner/name"):
        HubUpload.from_options("../etc", {"HF_TOKEN": "t"})
    assert HubUpload.from_options("me/ckpt", {"HF_TOKEN": " hf_x "}) == HubUpload("me/ckpt", "hf_x")
