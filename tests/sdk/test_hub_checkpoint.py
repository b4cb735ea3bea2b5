"""`cohort train --hub-repo`: a checkpointer uploads its epoch-end checkpoint to a Hub (here a local stand-in
speaking the Hub's HTTP API to huggingface_hub), the chain's checkpoint record points at the uploaded
revision once the finishers' vote settled on those weights, and a joiner with no peer to ask loads the
weights from that revision, verified against the hash on chain."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner
from huggingface_hub import constants
from support.hub_standin import HubStandIn
from support.scripted_run import funded_run, play_epoch
from support.tiny_models import tiny_model

from cohort.client.checkpoint import CheckpointError, HubUpload, load_checkpoint, save_checkpoint
from cohort.client.p2p import NodeKey, P2PNode
from cohort.client.runtime.events import Events
from cohort.client.runtime.hub_publish import publish_to_hub
from cohort.client.runtime.weights import CheckpointShelf
from cohort.sdk.run_config import load_run_file


@pytest.fixture
def hub(monkeypatch, tmp_path):
    with HubStandIn() as standin:
        monkeypatch.setenv("HF_ENDPOINT", standin.url)
        monkeypatch.setenv("HF_TOKEN", "hf_test")
        monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub-cache"))
        yield standin


def _client(chain, wallet, run, tmp_path: Path, name: str):
    """What publish_to_hub reads of a running client: its chain handle, wallet, the run and its events."""
    events = tmp_path / f"{name}.events.jsonl"
    return SimpleNamespace(chain=chain, wallet=wallet, run_address=run.address, latest=run,
                           events=Events(events, logs="none")), events  # fmt: skip


def _read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_a_checkpointer_uploads_points_the_chain_and_a_joiner_loads_it(workspace, helpers, core, hub,
                                                                              tmp_path):  # fmt: skip
    authority = workspace.wallet
    path = helpers.config_copy(
        tmp_path, "hubck", **{"checkpointers = []": f'checkpointers = ["{authority.pubkey()}"]'}
    )
    run_file = load_run_file(path, core)
    model = tiny_model()
    info = await asyncio.to_thread(
        save_checkpoint, model, tmp_path / "ckpts", run_id="hubck", step=0, epoch=0
    )
    async with funded_run(workspace, core, run_file) as (_rpc, chain, members):
        await play_epoch(chain, "hubck", members)
        run = await chain.fetch_run("hubck")
        for c in run.clients[:2]:  # a strict majority of the finishers votes these weights
            await chain.vote_weights(next(m for m in members if m.pubkey() == c.signer), "hubck", c.index,
                                     run.progress.step, info.manifest_hash)  # fmt: skip
        run = await chain.fetch_run("hubck")
        assert run.model.checkpoint.weights_sha256 == info.manifest_hash

        # a member that is not a checkpointer uploads, but the chain is left as it was, and it says why
        outsider, outsider_events = _client(chain, members[0], run, tmp_path, "outsider")
        upload = HubUpload.from_options("me/ckpt")
        assert upload is not None and upload.endpoint == hub.url
        first = await publish_to_hub(outsider, upload, info, 0, run.progress.step)
        outsider.events.close()
        assert first is not None
        said = {e["event"]: e for e in _read(outsider_events)}
        assert "not one of the run's checkpointers" in said["hub_not_pointed"]["reason"]
        assert (await chain.fetch_run("hubck")).model.checkpoint == run.model.checkpoint

        # the checkpointer: uploaded and pointed
        checkpointer, events = _client(chain, authority, run, tmp_path, "checkpointer")
        revision = await publish_to_hub(checkpointer, upload, info, 0, run.progress.step)
        checkpointer.events.close()
        said = {e["event"]: e for e in _read(events)}
        assert said["hub_uploaded"]["revision"] == revision and said["hub_uploaded"]["bytes"] > 0
        assert said["hub_pointed"]["revision"] == revision and "hub_not_pointed" not in said
        assert any(
            r.startswith("POST /me/ckpt.git/info/lfs/objects/batch") for r in hub.requests
        )  # weights by LFS
        pointer = (await chain.fetch_run("hubck")).model.checkpoint
        assert (pointer.kind, pointer.repo, pointer.revision) == ("P2P", "me/ckpt", revision)
        assert pointer.weights_sha256 == info.manifest_hash and pointer.step == run.progress.step

    # a joiner with no peer left: the revision the record names, verified against its hash
    async with P2PNode.http(NodeKey.generate(), "hubck") as node:
        shelf = CheckpointShelf(tmp_path / "joiner", node, worker=None)  # type: ignore[arg-type]
        loaded = await shelf.fetch(pointer.weights_sha256, [], hub=(pointer.repo, pointer.revision))
        restored = load_checkpoint(loaded, pointer.weights_sha256).model
        assert all((a == b).all() for a, b in zip(restored.state_dict().values(), model.state_dict().values(),
                                                  strict=True))  # fmt: skip
        # a revision that holds other weights fails verification: nothing is kept
        other = await asyncio.to_thread(save_checkpoint, tiny_model(seed=1), tmp_path / "other", run_id="hubck",
                                        step=0, epoch=0)  # fmt: skip
        stale = upload.upload(other.path, message="other weights")
        fresh = CheckpointShelf(tmp_path / "joiner2", node, worker=None)  # type: ignore[arg-type]
        with pytest.raises(CheckpointError):
            await fresh.fetch(pointer.weights_sha256, [], hub=("me/ckpt", stale))
        assert not any((tmp_path / "joiner2").glob("joined-*"))


def test_train_refuses_a_bad_hub_repo_or_a_missing_token_in_one_line(monkeypatch):
    from cohort.sdk.cli import cli

    monkeypatch.delenv("HF_TOKEN", raising=False)
    runner = CliRunner()
    for args, expected in (
        (["--hub-repo", "not a repo"], "owner/name"),
        (["--hub-repo", "me/ckpt"], "HF_TOKEN"),
    ):
        result = runner.invoke(cli, ["train", "--run", "r", *args, "-u", "http://127.0.0.1:1"])
        assert result.exit_code == 2, result.output
        assert expected in result.output and "Traceback" not in result.output
