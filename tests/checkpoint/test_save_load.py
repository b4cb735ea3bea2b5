"""Checkpoint round trip: save → transformers loads it → identical tensors; the manifest hash."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from support.tiny_models import tiny_model
from transformers import AutoModelForCausalLM, AutoTokenizer

from cohort.client.checkpoint import (
    CheckpointError,
    CheckpointWriter,
    list_checkpoints,
    load_checkpoint,
    load_weights,
    manifest_hash,
    save_checkpoint,
)
from cohort.client.data import load_tokenizer, pydoc_text, train_bpe
from cohort.client.data.preparation import pieces
from cohort.client.model import parameter_digest

TESTS = str(Path(__file__).resolve().parents[1])  # for subprocesses: tests/support


def same_tensors(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


@pytest.mark.parametrize(
    "preset,overrides,shard",
    [
        ("llama-tiny", {}, 2 << 30),
        ("llama-tiny", {"tie_word_embeddings": True}, 2 << 30),
        ("deepseek-tiny-moe", {}, 256 << 10),  # several shards + index
    ],
)
def test_transformers_loads_a_checkpoint_unchanged(tmp_path, preset, overrides, shard):
    model = tiny_model(preset, **overrides)
    info = save_checkpoint(
        model, tmp_path, run_id="run/../x", step=7, epoch=2, max_shard_bytes=shard
    )
    assert info.path == tmp_path / "run_.._x-step7" and info.step == 7
    files = {p.name for p in info.path.iterdir()}
    assert {"config.json", "cohort.json"} <= files
    assert ("model.safetensors.index.json" in files) == (shard < (1 << 20))
    meta = json.loads((info.path / "cohort.json").read_text())
    assert meta["run_id"] == "run/../x" and meta["epoch"] == 2
    assert meta["parameter_digest"] == parameter_digest(model)

    loaded = AutoModelForCausalLM.from_pretrained(info.path)  # plain transformers
    assert type(loaded) is type(model) and same_tensors(model, loaded)
    ours = load_checkpoint(info.path, info.manifest_hash)
    assert same_tensors(model, ours.model) and ours.meta.step == 7
    with pytest.raises(CheckpointError, match="manifest hash"):
        load_checkpoint(info.path, bytes(32))

    other = tiny_model(preset, seed=1, **overrides)
    assert parameter_digest(other) != parameter_digest(model)
    load_weights(other, info.path, info.manifest_hash)
    assert parameter_digest(other) == parameter_digest(model)


def test_manifest_hash_is_stable_across_processes_and_sees_one_byte(tmp_path):
    info = save_checkpoint(tiny_model(), tmp_path / "here", run_id="r", step=1, epoch=0)
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {TESTS!r})
        from support.tiny_models import tiny_model
        from cohort.client.checkpoint import save_checkpoint
        print(save_checkpoint(tiny_model(), {str(tmp_path / "there")!r}, run_id="r", step=1,
                              epoch=0).manifest_hash.hex())
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-1] == info.manifest_hash.hex()
    weights = info.path / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 1
    weights.write_bytes(bytes(data))
    assert manifest_hash(info.path) != info.manifest_hash
    with pytest.raises(CheckpointError):
        load_checkpoint(info.path, info.manifest_hash)


def test_tokenizer_files_travel_with_the_checkpoint(tmp_path, model):
    bpe = train_bpe(pieces(pydoc_text()), 300)
    info = save_checkpoint(model, tmp_path, run_id="r", step=1, epoch=0, tokenizer=bpe)
    hf = AutoTokenizer.from_pretrained(info.path)
    assert hf.encode("def main():") == bpe.encode("def main():").tolist()
    assert load_tokenizer(info.path).vocab_size == 300


class FailingTokenizer:
    def save(self, directory):
        (directory / "tokenizer.json").write_text("{")
        raise OSError("disk full")


def test_a_failed_save_leaves_the_previous_checkpoint(tmp_path, model):
    good = save_checkpoint(model, tmp_path, run_id="r", step=1, epoch=0)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(model, tmp_path, run_id="r", step=2, epoch=0, tokenizer=FailingTokenizer())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r-step1"]
    assert manifest_hash(good.path) == good.manifest_hash


CRASHING_SAVE = """
import os, sys, time
sys.path.insert(0, {here!r})
from support.tiny_models import tiny_model
from cohort.client.checkpoint import save_checkpoint

def progress(done, total):
    print("wrote", done, total, flush=True)
    time.sleep(60)  # killed here, half way through the shards

save_checkpoint(tiny_model(), {root!r}, run_id="r", step=2, epoch=0, max_shard_bytes=256 << 10,
                progress=progress)
"""


def test_a_killed_save_leaves_the_previous_checkpoint(tmp_path, model):
    good = save_checkpoint(model, tmp_path, run_id="r", step=1, epoch=0)
    script = CRASHING_SAVE.format(here=TESTS, root=str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()  # bounded: the child sleeps after its first shard
        assert line.startswith("wrote"), line
        assert any(p.name.startswith(".tmp-") for p in tmp_path.iterdir())
    finally:
        proc.kill()
        proc.wait(timeout=30)
        proc.stdout.close()
    assert [p.name for _, p in list_checkpoints(tmp_path)] == ["r-step1"]
    assert manifest_hash(good.path) == good.manifest_hash
    assert load_checkpoint(good.path, good.manifest_hash).meta.step == 1
    save_checkpoint(model, tmp_path, run_id="r", step=3, epoch=1)  # cleans the leftover
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r-step1", "r-step3"]


def test_background_writer_keeps_the_last_n(tmp_path, model):
    with CheckpointWriter(tmp_path, keep_last=2) as writer:
        futures = [writer.submit(model, run_id="r", step=s, epoch=s) for s in (1, 2, 3)]
        with torch.no_grad():  # training goes on while the writer works on its snapshot
            for p in model.parameters():
                p.add_(1.0)
        infos = [f.result(timeout=120) for f in futures]
    assert [p.name for _, p in list_checkpoints(tmp_path)] == ["r-step2", "r-step3"]
    assert manifest_hash(infos[-1].path) == infos[-1].manifest_hash
    loaded = load_checkpoint(infos[-1].path, infos[-1].manifest_hash).model
    assert parameter_digest(loaded) != parameter_digest(
        model
    )  # the snapshot, not the later weights
    assert infos[1].manifest_hash != infos[2].manifest_hash
