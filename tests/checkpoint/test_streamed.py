"""Checkpoints for big models: Hugging Face shards + index, streamed writes and reads in the model's
dtype, the bytes safetensors itself would write, and peak memory near the model's own."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from support.tiny_models import tiny_model
from transformers import AutoModelForCausalLM

from cohort.client.checkpoint import (
    CheckpointError,
    load_checkpoint,
    load_weights,
    read_tensors,
    save_checkpoint,
)
from cohort.client.checkpoint.tensorfile import TensorFileError, read_header, write_file
from cohort.client.model import parameter_digest

TESTS = str(Path(__file__).resolve().parents[1])


def bits_equal(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(
        sa[k].dtype == sb[k].dtype
        and torch.equal(sa[k].reshape(-1).view(torch.uint8), sb[k].reshape(-1).view(torch.uint8))
        for k in sa
    )


def test_small_shards_make_hf_index_that_transformers_loads(tmp_path):
    model = tiny_model()
    limit = 200 << 10
    info = save_checkpoint(model, tmp_path, run_id="r", step=3, epoch=1, max_shard_bytes=limit)
    shards = sorted(info.path.glob("*.safetensors"))
    n = len(shards)
    assert n > 3 and not (info.path / "model.safetensors").exists()
    assert [s.name for s in shards] == [
        f"model-{k:05d}-of-{n:05d}.safetensors" for k in range(1, n + 1)
    ]
    index = json.loads((info.path / "model.safetensors.index.json").read_text())
    state = model.state_dict()
    assert set(index["weight_map"]) == set(state)  # untied model: every tensor, once
    assert index["metadata"]["total_size"] == sum(
        t.numel() * t.element_size() for t in state.values()
    )
    for shard in shards:  # a shard over the limit holds one tensor that is bigger alone
        tensors = read_header(shard)
        assert all(index["weight_map"][name] == shard.name for name in tensors)
        assert sum(e.nbytes for e in tensors.values()) <= limit or len(tensors) == 1

    loaded = AutoModelForCausalLM.from_pretrained(info.path)  # plain transformers reads the index
    assert bits_equal(model, loaded)
    other = tiny_model(seed=1)
    load_weights(other, info.path, info.manifest_hash)  # streamed, shard by shard
    assert bits_equal(model, other) and parameter_digest(other) == parameter_digest(model)
    assert bits_equal(model, load_checkpoint(info.path, info.manifest_hash).model)


def test_files_are_the_bytes_safetensors_writes(tmp_path):
    """Same layout as save_file (dtype order, names, padding): the manifest hash does not depend on
    which of the two wrote a checkpoint, and any safetensors reader reads ours."""
    tensors = {
        "b.weight": torch.randn(3, 5),
        "a.bias": torch.randn(7, dtype=torch.float64),
        "c": torch.arange(5, dtype=torch.int8),
        "scalar": torch.tensor(2.5, dtype=torch.bfloat16),
        "empty": torch.zeros(0, 4),
        "strided": torch.randn(4, 6).t(),  # not contiguous: written in logical order
        **{k: v for k, v in tiny_model().state_dict().items() if "layers.0." in k},
    }
    write_file(tmp_path / "ours.safetensors", tensors, metadata={"format": "pt"})
    contiguous = {k: v.contiguous() for k, v in tensors.items()}
    save_file(contiguous, tmp_path / "theirs.safetensors", metadata={"format": "pt"})
    assert (tmp_path / "ours.safetensors").read_bytes() == (
        tmp_path / "theirs.safetensors"
    ).read_bytes()
    back = load_file(tmp_path / "ours.safetensors")
    assert back.keys() == tensors.keys() and all(torch.equal(back[k], tensors[k]) for k in tensors)


def test_a_bf16_model_is_saved_and_loaded_in_bf16(tmp_path):
    model = tiny_model().to(torch.bfloat16)
    fp32 = save_checkpoint(tiny_model(), tmp_path / "fp32", run_id="r", step=1, epoch=0)
    info = save_checkpoint(model, tmp_path / "bf16", run_id="r", step=1, epoch=0)
    assert {e.dtype for e in read_header(info.path / "model.safetensors").values()} == {
        torch.bfloat16
    }
    size = (info.path / "model.safetensors").stat().st_size
    assert size < 0.51 * (fp32.path / "model.safetensors").stat().st_size
    assert json.loads((info.path / "config.json").read_text())["dtype"] == "bfloat16"
    loaded = AutoModelForCausalLM.from_pretrained(info.path, dtype="auto")
    assert bits_equal(model, loaded)
    ours = load_checkpoint(info.path, info.manifest_hash).model
    assert next(ours.parameters()).dtype == torch.bfloat16 and bits_equal(model, ours)
    other = tiny_model(seed=3).to(torch.bfloat16)
    load_weights(other, info.path, info.manifest_hash)
    assert bits_equal(model, other)
    widened = tiny_model(seed=3)  # a model of another dtype takes the weights converted
    load_weights(widened, info.path, info.manifest_hash)
    assert torch.equal(widened.lm_head.weight, model.lm_head.weight.float())


def test_a_lying_header_is_refused_before_anything_is_read(tmp_path, model):
    def file_with(header: dict, data: bytes = b"\0" * 16) -> Path:
        raw = json.dumps(header).encode()
        path = tmp_path / "x.safetensors"
        path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)
        return path

    entry = {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}
    assert read_header(file_with({"t": entry}))["t"].nbytes == 16
    for bad in (
        {"t": {**entry, "shape": [1 << 38], "data_offsets": [0, 1 << 40]}},  # past the end
        {"t": {**entry, "shape": [1 << 30]}},  # shape and span disagree
        {"t": {**entry, "dtype": "F99"}},
        {"t": entry, "u": {**entry, "data_offsets": [8, 24]}},  # overlapping
        {"t": {**entry, "shape": [-4]}},
    ):
        with pytest.raises(TensorFileError):
            read_header(file_with(bad, b"\0" * 24))
    (tmp_path / "x.safetensors").write_bytes(struct.pack("<Q", 1 << 40))
    with pytest.raises(TensorFileError, match="does not fit"):
        read_header(tmp_path / "x.safetensors")

    # shapes are checked against every header before any weight changes
    info = save_checkpoint(
        tiny_model(preset="llama-small"), tmp_path / "s", run_id="r", step=1, epoch=0
    )
    before = parameter_digest(model)
    with pytest.raises(CheckpointError, match="shape"):
        load_weights(model, info.path, info.manifest_hash)
    assert parameter_digest(model) == before
    assert read_tensors(info.path).keys() == tiny_model(preset="llama-small").state_dict().keys()


def test_progress_is_reported_per_tensor(tmp_path, model):
    seen: list[tuple[int, int]] = []
    info = save_checkpoint(
        model, tmp_path, run_id="r", step=1, epoch=0, progress=lambda d, t: seen.append((d, t))
    )
    total = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    assert len(seen) == len(model.state_dict()) and seen[-1] == (total, total)
    read: list[tuple[int, int]] = []
    load_weights(
        tiny_model(seed=2), info.path, info.manifest_hash, progress=lambda d, t: read.append((d, t))
    )
    assert read[-1] == (total, total) and len(read) == len(seen)


MEMORY = """
import gc, json, sys
sys.path.insert(0, {tests!r})
from support.tiny_models import tiny_model
from cohort.client.checkpoint import CheckpointWriter, load_checkpoint, load_weights, save_checkpoint

def rise(fn):
    gc.collect()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the high-water mark starts again at the current RSS
    status = dict(line.split(":", 1) for line in open("/proc/self/status"))
    base = int(status["VmRSS"].split()[0])
    result = fn()
    status = dict(line.split(":", 1) for line in open("/proc/self/status"))
    return (int(status["VmHWM"].split()[0]) - base) * 1024, result

# llama-100m's width, half its layers and an 8k vocabulary: ~49M parameters, ~195 MB in fp32
model = tiny_model("llama-100m", vocab_size=8192, num_hidden_layers=6)
size = sum(p.numel() * p.element_size() for p in model.parameters())
save, info = rise(lambda: save_checkpoint(model, {root!r}, run_id="r", step=1, epoch=0,
                                          max_shard_bytes={shard}))
def background():
    with CheckpointWriter({root!r}) as writer:
        return writer.submit(model, run_id="r", step=2, epoch=0).result()
writer, _ = rise(background)
load, _ = rise(lambda: load_weights(model, info.path, info.manifest_hash))
build, _ = rise(lambda: load_checkpoint(info.path, info.manifest_hash))
print(json.dumps({{"size": size, "save": save, "writer": writer, "load_weights": load,
                  "load_checkpoint": build}}))
"""


@pytest.mark.parametrize("shard", [2 << 30, 64 << 20])
def test_save_and_load_of_a_50m_model_stay_near_its_size(tmp_path, shard):
    script = MEMORY.format(tests=TESTS, root=str(tmp_path), shard=shard)
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    m = json.loads(out.stdout.strip().splitlines()[-1])
    ratios = {k: round(v / m["size"], 2) for k, v in m.items() if k != "size"}
    # a blocking save and a load read a tensor at a time (before: ~1.07x and ~1.03x); the background
    # writer copies the weights once; from_pretrained maps the files
    assert ratios["save"] < 0.3 and ratios["load_weights"] < 0.3, ratios
    assert ratios["writer"] < 1.3 and ratios["load_checkpoint"] < 1.3, ratios
