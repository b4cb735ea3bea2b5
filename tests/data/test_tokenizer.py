"""BPE trained on the KJV offline: round trips, vocabulary checks, prepared shards, the CLI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer

from cohort.client.data import (
    BatchId,
    BpeTokenizer,
    ByteTokenizer,
    DataError,
    VocabMismatch,
    check_vocab,
    kjv_text,
    load_tokenizer,
    open_data_location,
    prepare,
    train_bpe,
)
from cohort.client.data.preparation import pieces
from cohort.client.data.shards import directory_manifest

COHORT = str(Path(sys.executable).parent / "cohort")
SAMPLE = "In the beginning God created the heaven and the earth.\nAnd the earth was without form — ünïcødé 🙂"


@pytest.fixture(scope="module")
def bpe() -> BpeTokenizer:
    return train_bpe(pieces(kjv_text()), 1024)


def test_bpe_trained_on_kjv_round_trips_text(bpe, tmp_path):
    assert bpe.vocab_size == 1024 and bpe.eos_id is not None
    ids = bpe.encode(SAMPLE)
    assert bpe.decode(ids) == SAMPLE
    assert len(ids) < 0.5 * len(SAMPLE.encode())  # it compresses English
    bpe.save(tmp_path)
    again = load_tokenizer(tmp_path / "tokenizer.json")
    assert np.array_equal(again.encode(SAMPLE), ids)
    hf = AutoTokenizer.from_pretrained(tmp_path)  # what a checkpoint's readers use
    assert hf.encode(SAMPLE) == ids.tolist() and hf.decode(ids) == SAMPLE
    assert isinstance(load_tokenizer("byte"), ByteTokenizer)


def test_vocab_mismatch_with_the_run_is_refused(bpe, tmp_path):
    check_vocab(bpe, 1024)
    with pytest.raises(VocabMismatch, match="1024 tokens but the run's vocab_size is 256"):
        check_vocab(bpe, 256)
    text = tmp_path / "psalm.txt"
    text.write_text(kjv_text()[:200_000])
    prepared = prepare(text, bpe, tmp_path / "prepared", shard_tokens=10_000)
    assert (
        prepared.shards > 1 and prepared.manifest_hash == directory_manifest(prepared.path).hash()
    )
    provider = open_data_location(
        str(prepared.path), 32, vocab_size=1024, expected_hash=prepared.manifest_hash
    )
    tokens = provider.sequences(BatchId(0, 4))
    assert tokens.max() < 1024 and tokens.shape == (4, 32)
    assert torch.equal(torch.from_numpy(bpe.encode(bpe.decode(tokens[0]))), tokens[0])
    with pytest.raises(
        VocabMismatch, match="1024-token vocabulary, but the run's vocab_size is 256"
    ):
        open_data_location(str(prepared.path), 32, vocab_size=256)
    with pytest.raises(ValueError, match="fewer than vocab_size"):
        train_bpe(["tiny text"], 4096)
    with pytest.raises(ValueError, match=r"not a tokenizer\.json"):
        load_tokenizer(text)


def test_cli_trains_prepares_and_refuses(tmp_path):
    tok = tmp_path / "tok.json"
    run = subprocess.run(
        [COHORT, "data", "train-tokenizer", "pydoc", "--vocab-size", "512", "--out", str(tok)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert load_tokenizer(tok).vocab_size == 512
    out = tmp_path / "prepared"
    run = subprocess.run(
        [COHORT, "data", "prepare", "pydoc", "--tokenizer", str(tok), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert f"manifest hash {directory_manifest(out).hash().hex()}" in run.stdout
    assert "tokenizing" in run.stderr  # the progress bar
    again = subprocess.run(
        [COHORT, "data", "prepare", "pydoc", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert again.returncode == 1 and "exists" in again.stderr and again.stderr.count("\n") == 1
    wrong = subprocess.run(
        [
            COHORT,
            "data",
            "prepare",
            "pydoc",
            "--tokenizer",
            str(tok),
            "--vocab-size",
            "256",
            "--out",
            str(tmp_path / "o2"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert wrong.returncode == 1 and "vocab_size is 256" in wrong.stderr


def test_prepare_refuses_non_text(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_text("hello\n")
    (tmp_path / "in" / "b.bin").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(DataError, match="not UTF-8"):
        prepare(tmp_path / "in", ByteTokenizer(), tmp_path / "out")
    assert not (tmp_path / "out").exists() and [p.name for p in tmp_path.iterdir()] == ["in"]
    (tmp_path / "in" / "b.bin").unlink()
    (tmp_path / "in" / "c.txt").write_text("world\n")
    done = prepare(tmp_path / "in", ByteTokenizer(), tmp_path / "out")
    assert done.n_tokens == len("hello\n\nworld\n")
