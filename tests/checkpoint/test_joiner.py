"""Where joiners get weights: peers (one or all serving corrupt bytes), the hub path, the seed."""

from __future__ import annotations

import shutil
from contextlib import AsyncExitStack

import pytest
import torch

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


async def test_all_peers_corrupt_is_a_clear_error_and_nothing_is_kept(nodes, tmp_path, model):
    info = save_checkpoint(model, tmp_path / "saved", run_id="r", step=5, epoch=1)
    manifest = Manifest.of_directory(info.path)
    liars = await nodes(3)
    joiner = liars.pop()
    for k, liar in enumerate(liars):
        await liar.share_directory(corrupt_copy(info.path, tmp_path / f"bad{k}"), manifest)
    dest = tmp_path / "joined"
    with pytest.raises(CheckpointUnavailable, match="from 2 peers"):
        await fetch_checkpoint(FromPeers(joiner, tuple(p.address for p in liars)), info.manifest_hash, dest)
    assert not dest.exists() and not any(p.name.startswith(".tmp-") for p in tmp_path.iterdir())
    with pytest.raises(CheckpointUnavailable, match="no peer"):
        await fetch_checkpoint(FromPeers(joiner, ()), info.manifest_hash, dest)

    # P2PHub: no peer delivers, so the hub source (here a local directory) is used
    got = await fetch_checkpoint(
        FromPeersThenHub(FromPeers(joiner, (liars[0].address,)), FromHub(str(info.path))),
        info.manifest_hash,
        dest,
    )
    assert got == info.path


async def test_hub_local_directory_is_verified(tmp_path, model):
    info = save_checkpoint(model, tmp_path / "saved", run_id="r", step=1, epoch=0)
    assert await fetch_checkpoint(FromSeed(), info.manifest_hash, tmp_path / "x") is None
    assert await fetch_checkpoint(FromHub(str(info.path)), info.manifest_hash, tmp_path / "x") == info.path
    bad = corrupt_copy(info.path, tmp_path / "bad")
    with pytest.raises(CheckpointUnavailable, match="manifest hash"):
        await fetch_checkpoint(FromHub(str(bad)), info.manifest_hash, tmp_path / "x")
    with pytest.raises(CheckpointUnavailable, match="owner/name"):
        await fetch_checkpoint(FromHub("not a repo", revision="main"), info.manifest_hash, tmp_path / "x")


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
    assert torch.equal(load_checkpoint(dest, info.manifest_hash).model.lm_head.weight, model.lm_head.weight)
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
