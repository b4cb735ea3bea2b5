"""The `datasets` source of `cohort data prepare`: parquet, arrow and jsonl shards (and a Hub dataset, from a
local stand-in of the Hub) give the same tokens as the same documents given as text files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from huggingface_hub import constants
from support.hub_standin import HubStandIn

from cohort.client.data import ByteTokenizer, DataError, prepare, records, train_bpe
from cohort.client.data.records import records_source

DOCS = ["In the beginning was the word.\n", "", "Zwei Dokumente, ünïcödé ok.\nSecond line\n",
        "x" * 3000, "last one, no newline"]  # fmt: skip


def text_dir(folder: Path, docs: list[str]) -> Path:
    folder.mkdir()
    for k, doc in enumerate(docs):
        (folder / f"doc{k:03d}.txt").write_text(doc, encoding="utf-8")
    return folder


def parquet_file(path: Path, docs: list[str], row_group: int = 2) -> Path:
    table = pa.table({"id": list(range(len(docs))), "text": docs})
    pq.write_table(table, path, row_group_size=row_group)  # several row groups: read group by group
    return path


def test_parquet_arrow_and_jsonl_give_the_tokens_of_the_same_text(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(records, "BATCH_ROWS", 2)  # several batches a shard: read batch by batch
    tokenizer = train_bpe(iter(DOCS * 4), 300)
    expected = prepare(text_dir(tmp_path / "text", DOCS), tokenizer, tmp_path / "from-text")

    seen: list[int] = []
    parquet = parquet_file(tmp_path / "train.parquet", DOCS)
    got = prepare(parquet, tokenizer, tmp_path / "from-parquet", progress=seen.append)
    assert got.manifest_hash == expected.manifest_hash and got.n_tokens == expected.n_tokens
    assert sum(seen) == parquet.stat().st_size and len(seen) == 3  # a report per batch read

    # a directory of shards (two parquet files, in name order), an arrow stream as `datasets` saves it, jsonl
    shards = tmp_path / "shards"
    shards.mkdir()
    parquet_file(shards / "part-0.parquet", DOCS[:2])
    parquet_file(shards / "part-1.parquet", DOCS[2:])
    (shards / "README.md").write_text("a dataset card is not a shard")
    assert prepare(shards, tokenizer, tmp_path / "from-dir").manifest_hash == expected.manifest_hash

    arrow = tmp_path / "data.arrow"
    table = pa.table({"text": DOCS})
    with pa.OSFile(str(arrow), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=2)
    assert (
        prepare(arrow, tokenizer, tmp_path / "from-arrow").manifest_hash == expected.manifest_hash
    )

    jsonl = tmp_path / "data.jsonl"
    jsonl.write_text("".join(json.dumps({"body": d}) + "\n" for d in DOCS))
    got = prepare(jsonl, tokenizer, tmp_path / "from-jsonl", text_column="body")
    assert got.manifest_hash == expected.manifest_hash


def test_a_hub_dataset_is_read_shard_by_shard(tmp_path: Path, monkeypatch):
    expected = prepare(text_dir(tmp_path / "text", DOCS), ByteTokenizer(), tmp_path / "from-text")
    parts = [
        parquet_file(tmp_path / f"{k}.parquet", docs) for k, docs in enumerate((DOCS[:3], DOCS[3:]))
    ]
    with HubStandIn() as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub-cache"))
        revision = hub.put("dataset", "me/corpus", {"README.md": b"card",
                                                    "data/train-00000-of-00002.parquet": parts[0].read_bytes(),
                                                    "data/train-00001-of-00002.parquet": parts[1].read_bytes(),
                                                    "other/ignored.parquet": parts[0].read_bytes()})  # fmt: skip
        got = prepare(
            f"hf://datasets/me/corpus@{revision}/data", ByteTokenizer(), tmp_path / "from-hub"
        )
        assert got.manifest_hash == expected.manifest_hash
        with pytest.raises(DataError, match="no parquet, arrow or jsonl shards"):
            prepare("hf://datasets/me/corpus/nothing-here", ByteTokenizer(), tmp_path / "none")
        with pytest.raises(DataError, match="me/absent"):
            prepare("hf://datasets/me/absent", ByteTokenizer(), tmp_path / "absent")


def test_bad_records_sources_are_one_clear_error(tmp_path: Path):
    parquet = parquet_file(tmp_path / "t.parquet", DOCS)
    with pytest.raises(DataError, match="no column 'body'"):
        prepare(parquet, ByteTokenizer(), tmp_path / "a", text_column="body")
    numbers = tmp_path / "n.parquet"
    pq.write_table(pa.table({"text": [1, 2]}), numbers)
    with pytest.raises(DataError, match="not text"):
        prepare(numbers, ByteTokenizer(), tmp_path / "b")
    (tmp_path / "broken.jsonl").write_text('{"text": "ok"}\n{oops\n')
    with pytest.raises(DataError, match="line 2 is not JSON"):
        prepare(tmp_path / "broken.jsonl", ByteTokenizer(), tmp_path / "c")
    (tmp_path / "fake.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(DataError, match="not a readable parquet file"):
        prepare(tmp_path / "fake.parquet", ByteTokenizer(), tmp_path / "d")
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    parquet_file(mixed / "a.parquet", DOCS)
    (mixed / "notes.txt").write_text("text")
    with pytest.raises(DataError, match="prepare one kind at a time"):
        records_source(mixed)
    with pytest.raises(DataError, match="hf://datasets/OWNER/NAME"):
        records_source("hf://models/x")
    assert not any(
        p.name.startswith(".tmp") for p in tmp_path.iterdir()
    )  # nothing half-written is left


def test_cohort_data_prepare_reads_parquet_with_progress(tmp_path: Path):
    parquet = parquet_file(tmp_path / "t.parquet", DOCS)
    cohort = [sys.executable, "-m", "cohort.sdk.cli", "data", "prepare"]
    done = subprocess.run([*cohort, str(parquet), "--out", str(tmp_path / "out")], capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "tokens in 1 shards" in done.stdout and "tokenizing: 100%" in done.stderr
    bad = subprocess.run([*cohort, str(parquet), "--out", str(tmp_path / "bad"), "--text-column", "nope"],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert bad.returncode == 1 and bad.stderr.strip().splitlines()[-1].startswith("Error: ")
    assert "no column 'nope'" in bad.stderr and "Traceback" not in bad.stderr
