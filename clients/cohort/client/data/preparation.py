"""`cohort data prepare`: tokenize text into shards with an index and a manifest hash.

Input: a text file, a directory (every regular file under it, in name order, each a document), a
built-in corpus name ("kjv", "pydoc"), or a `datasets`-style records source (records.py: parquet, arrow
or jsonl shards, or hf://datasets/OWNER/NAME), each row's text column a document. Documents are joined
with the tokenizer's end-of-text token (a newline for the byte tokenizer). The output appears atomically
under `out`.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .corpus import CORPORA, load_corpus
from .records import records_source
from .shards import (
    DTYPES,
    INDEX_FILE,
    MANIFEST_FILE,
    TOKENS_DIR,
    DataError,
    DataIndex,
    ShardEntry,
    directory_manifest,
    dtype_for,
)
from .tokenizer import BpeTokenizer, Tokenizer

PIECE_CHARS = 1 << 20  # tokenized at a time, cut at line ends
DEFAULT_SHARD_TOKENS = 1 << 27

Progress = Callable[[int], None]
"""Called with the number of input characters (text sources) or shard bytes (records sources) just consumed."""


@dataclass(frozen=True)
class PreparedData:
    path: Path
    manifest_hash: bytes
    n_tokens: int
    shards: int


def documents(source: str | Path) -> Iterator[tuple[str, int]]:
    """(name, size in characters) of each input document, without reading them all at once."""
    if str(source) in CORPORA and not Path(source).exists():
        yield str(source), len(load_corpus(str(source)))
        return
    path = Path(source)
    if path.is_file():
        yield str(path), path.stat().st_size
    elif path.is_dir():
        for child in sorted(p for p in path.rglob("*") if p.is_file() and not p.is_symlink()):
            yield str(child), child.stat().st_size
    else:
        raise DataError(
            f"{source}: not a file, a directory or a built-in corpus ({', '.join(CORPORA)})"
        )


def read_document(name: str) -> str:
    if name in CORPORA and not Path(name).exists():
        return load_corpus(name)
    try:
        return Path(name).read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"{name}: not UTF-8 text (byte {e.start})") from None
    except OSError as e:
        raise DataError(f"{name}: {e.strerror}") from None


def source_texts(
    source: str | Path, text_column: str = "text", progress: Progress | None = None
) -> Iterator[str]:
    """Each document of `source`, in order. A records source reports progress itself (shard bytes); a text
    source does not (its caller counts characters as it consumes them)."""
    records = records_source(source, text_column)
    if records is not None:
        yield from records.texts(progress)
        return
    for name, _ in documents(source):
        yield read_document(name)


def source_size(source: str | Path, text_column: str = "text") -> tuple[int, str]:
    """The input's size for a progress bar, and its unit: characters of a text source, bytes of shards."""
    records = records_source(source, text_column)
    if records is None:
        return sum(size for _, size in documents(source)), "char"
    if hasattr(records, "total"):
        return records.total, "B"
    return sum(size for _, size in records.listing()), "B"


def pieces(text: str) -> Iterator[str]:
    """The text in pieces of about PIECE_CHARS, each ending at a line end where there is one."""
    at = 0
    while at < len(text):
        end = min(len(text), at + PIECE_CHARS)
        if end < len(text):
            cut = text.rfind("\n", at, end)
            end = cut + 1 if cut > at else end
        yield text[at:end]
        at = end


def prepare(
    source: str | Path,
    tokenizer: Tokenizer,
    out: str | Path,
    *,
    heldout_fraction: float = 0.05,
    shard_tokens: int = DEFAULT_SHARD_TOKENS,
    progress: Progress | None = None,
    text_column: str = "text",
) -> PreparedData:
    """Tokenize `source` into `out` (which must not exist yet); `text_column` names the text of a records
    source's rows."""
    out = Path(out)
    if out.exists():
        raise DataError(f"{out} exists; choose a new output directory")
    if shard_tokens < 1 or not 0.0 < heldout_fraction < 1.0:
        raise ValueError("shard_tokens >= 1 and 0 < heldout_fraction < 1 are required")
    dtype_name = dtype_for(tokenizer.vocab_size)
    dtype = DTYPES[dtype_name]
    temp = out.with_name(f".tmp-{out.name}-{uuid.uuid4().hex[:8]}")
    tokens_dir = temp / TOKENS_DIR
    tokens_dir.mkdir(parents=True)
    try:
        writer = _ShardWriter(tokens_dir, dtype, shard_tokens)
        separator = (
            np.array([tokenizer.eos_id], dtype=np.int64)
            if tokenizer.eos_id is not None
            else tokenizer.encode("\n")
        )
        counts_chars = records_source(source, text_column) is None
        for k, text in enumerate(
            source_texts(source, text_column, None if counts_chars else progress)
        ):
            if k:
                writer.write(separator)
            for piece in pieces(text):
                ids = tokenizer.encode(piece)
                if len(ids) and (ids.min() < 0 or ids.max() >= tokenizer.vocab_size):
                    raise DataError(f"{source}: the tokenizer produced ids outside its vocabulary")
                writer.write(ids)
                if progress is not None and counts_chars:
                    progress(len(piece))
        shards = writer.close()
        kind = "tokenizer.json" if isinstance(tokenizer, BpeTokenizer) else "byte"
        tokenizer.save(tokens_dir)
        index = DataIndex(dtype_name, tokenizer.vocab_size, heldout_fraction, kind, tuple(shards))
        (tokens_dir / INDEX_FILE).write_bytes(index.encode())
        manifest = directory_manifest(temp)
        (temp / MANIFEST_FILE).write_bytes(manifest.encode())
        os.rename(temp, out)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    return PreparedData(out, manifest.hash(), index.n_tokens, len(shards))


class _ShardWriter:
    def __init__(self, directory: Path, dtype: np.dtype, shard_tokens: int) -> None:
        self.directory, self.dtype, self.shard_tokens = directory, dtype, shard_tokens
        self.shards: list[ShardEntry] = []
        self._file = None
        self._count = 0

    def write(self, ids: np.ndarray) -> None:
        ids = ids.astype(self.dtype, copy=False)
        while len(ids):
            if self._file is None or self._count == self.shard_tokens:
                self._next()
            take = min(len(ids), self.shard_tokens - self._count)
            self._file.write(ids[:take].tobytes())
            self._count += take
            ids = ids[take:]

    def close(self) -> list[ShardEntry]:
        if self._file is None:
            raise DataError("the input holds no text")
        self._finish()
        return self.shards

    def _next(self) -> None:
        if self._file is not None:
            self._finish()
        name = f"shard-{len(self.shards):05d}.bin"
        self._file = open(self.directory / name, "wb")
        self.shards.append(ShardEntry(name, 0))
        self._count = 0

    def _finish(self) -> None:
        self._file.close()
        self.shards[-1] = ShardEntry(self.shards[-1].name, self._count)
