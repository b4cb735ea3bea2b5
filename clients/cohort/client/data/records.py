"""A Hugging Face `datasets`-style source for `cohort data prepare`: rows of a text column in parquet, arrow
or JSON-lines shards on disk, or in a dataset repo on the Hub (`hf://datasets/OWNER/NAME[@REVISION][/PATH]`).

Each row is one document, exactly as each file of a text directory is: the same text gives the same tokens
whichever way it comes. Shards are read in name order, a batch of rows at a time (a parquet row group, an
arrow record batch, a line), so memory stays flat whatever a shard's size; Hub shards are downloaded one at a
time (huggingface_hub's byte progress bar and ETA) and read from its cache. Progress counts shard bytes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from .shards import DataError

FORMATS = {".parquet": "parquet", ".arrow": "arrow", ".jsonl": "jsonl"}
HUB_PREFIX = "hf://datasets/"
_HUB = re.compile(
    r"^hf://datasets/([A-Za-z0-9][\w.-]{0,95}/[A-Za-z0-9][\w.-]{0,95})(?:@([\w.\-/]+?))?(?:/(.*))?$"
)
BATCH_ROWS = 1024

Progress = Callable[[int], None]
"""Called with the number of shard bytes just consumed."""


@dataclass(frozen=True)
class RecordFile:
    path: Path
    format: str  # parquet | arrow | jsonl
    size: int  # bytes


def shard_format(path: Path) -> str | None:
    return FORMATS.get(path.suffix.lower())


@dataclass(frozen=True)
class RecordFiles:
    """Shards on disk: one file, or every shard under a directory (in name order)."""

    files: tuple[RecordFile, ...]
    column: str = "text"

    @property
    def total(self) -> int:
        return sum(f.size for f in self.files)

    def texts(self, progress: Progress | None = None) -> Iterator[str]:
        for f in self.files:
            yield from read_texts(f, self.column, progress)


@dataclass(frozen=True)
class HubDataset:
    """A dataset repo's shards under `prefix` at `revision`, downloaded one at a time."""

    repo: str
    revision: str | None = None
    prefix: str = ""
    column: str = "text"

    def listing(self) -> list[tuple[str, int]]:
        """(path in the repo, size) of each shard, in name order; DataError when there are none."""
        from huggingface_hub import HfApi
        from huggingface_hub.errors import HfHubHTTPError

        from ..checkpoint.hub import hub_endpoint

        try:
            entries = HfApi(endpoint=hub_endpoint()).list_repo_tree(
                self.repo, repo_type="dataset", revision=self.revision, recursive=True
            )
            found = sorted((e.path, int(getattr(e, "size", 0) or 0)) for e in entries
                           if shard_format(Path(e.path)) and e.path.startswith(self.prefix))  # fmt: skip
        except (HfHubHTTPError, OSError, ValueError) as e:
            raise DataError(f"{self.name}: {type(e).__name__}: {e}"[:300]) from None
        if not found:
            raise DataError(f"{self.name}: no parquet, arrow or jsonl shards")
        return found

    @property
    def name(self) -> str:
        at = f"@{self.revision}" if self.revision else ""
        return f"{HUB_PREFIX}{self.repo}{at}" + (f"/{self.prefix}" if self.prefix else "")

    def texts(
        self, progress: Progress | None = None, listing: list[tuple[str, int]] | None = None
    ) -> Iterator[str]:
        from huggingface_hub import hf_hub_download
        from huggingface_hub.errors import HfHubHTTPError

        from ..checkpoint.hub import hub_endpoint

        for name, _size in listing or self.listing():
            try:
                local = Path(hf_hub_download(self.repo, name, repo_type="dataset", revision=self.revision,
                                             endpoint=hub_endpoint()))  # fmt: skip
            except (HfHubHTTPError, OSError, ValueError) as e:
                raise DataError(f"{self.name}: {name}: {type(e).__name__}: {e}"[:300]) from None
            fmt = shard_format(local) or shard_format(Path(name))
            assert fmt is not None
            yield from read_texts(
                RecordFile(local, fmt, local.stat().st_size), self.column, progress
            )


def records_source(source: str | Path, column: str = "text") -> RecordFiles | HubDataset | None:
    """The records source `source` names, or None when it is a text source (a text file, a directory of
    text files, a built-in corpus). A directory that holds shards must hold nothing else (hidden files and
    READMEs aside): a mix would silently read some shards as text."""
    text = str(source)
    if text.startswith("hf://"):
        m = _HUB.match(text)
        if m is None:
            raise DataError(f"{text}: a Hub dataset is hf://datasets/OWNER/NAME[@REVISION][/PATH]")
        return HubDataset(m.group(1), m.group(2), (m.group(3) or "").strip("/"), column)
    path = Path(source)
    if path.is_file():
        fmt = shard_format(path)
        return RecordFiles((RecordFile(path, fmt, path.stat().st_size),), column) if fmt else None
    if not path.is_dir():
        return None
    files = sorted(p for p in path.rglob("*") if p.is_file() and not p.is_symlink()
                   and not any(part.startswith(".") for part in p.relative_to(path).parts))  # fmt: skip
    shards = [p for p in files if shard_format(p)]
    if not shards:
        return None
    others = [p for p in files if not shard_format(p) and not p.name.lower().startswith("readme")]
    if others:
        raise DataError(f"{path}: holds parquet/arrow/jsonl shards and other files ({others[0].name}); "
                        "prepare one kind at a time")  # fmt: skip
    return RecordFiles(
        tuple(RecordFile(p, shard_format(p) or "", p.stat().st_size) for p in shards), column
    )


def read_texts(f: RecordFile, column: str, progress: Progress | None = None) -> Iterator[str]:
    """The `column` text of each row of one shard (rows whose value is null are skipped)."""
    if f.format == "jsonl":
        yield from _jsonl(f, column, progress)
        return
    import pyarrow as pa

    try:
        batches, rows = _arrow_batches(f, column)
        done, reported = 0, 0
        for batch in batches:
            if column not in batch.schema.names:
                raise DataError(
                    f"{f.path}: no column {column!r} (it has {', '.join(batch.schema.names)[:200]})"
                )
            values = batch.column(column)
            if not (pa.types.is_string(values.type) or pa.types.is_large_string(values.type)):
                raise DataError(f"{f.path}: column {column!r} holds {values.type}, not text")
            for value in values.to_pylist():
                if value is not None:
                    yield value
            done += batch.num_rows
            if progress is not None and rows:
                now = f.size * done // rows
                progress(now - reported)
                reported = now
        if progress is not None and reported < f.size:
            progress(f.size - reported)
    except (pa.ArrowException, OSError) as e:
        raise DataError(
            f"{f.path}: not a readable {f.format} file ({type(e).__name__}: {e})"[:300]
        ) from None


def _arrow_batches(f: RecordFile, column: str) -> tuple[Iterator, int]:
    """Record batches of a parquet file (row group by row group) or an arrow IPC file or stream (what
    `datasets` writes), and the row count."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if f.format == "parquet":
        parquet = pq.ParquetFile(f.path)
        names = parquet.schema_arrow.names
        if column not in names:
            raise DataError(f"{f.path}: no column {column!r} (it has {', '.join(names)[:200]})")
        return parquet.iter_batches(
            batch_size=BATCH_ROWS, columns=[column]
        ), parquet.metadata.num_rows
    source = pa.memory_map(str(f.path))
    try:
        reader = pa.ipc.open_file(source)
        return (reader.get_batch(i) for i in range(reader.num_record_batches)), reader.count_rows()
    except pa.ArrowInvalid:
        source.seek(0)
        stream = pa.ipc.open_stream(source)
        return iter(
            stream
        ), 0  # a stream does not say its length up front: progress comes at its end


def _jsonl(f: RecordFile, column: str, progress: Progress | None) -> Iterator[str]:
    with open(f.path, "rb") as lines:
        for number, line in enumerate(lines, 1):
            if progress is not None:
                progress(len(line))
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                raise DataError(f"{f.path}: line {number} is not JSON") from None
            value = row.get(column) if isinstance(row, dict) else None
            if value is None and isinstance(row, dict) and column in row:
                continue
            if not isinstance(value, str):
                raise DataError(f"{f.path}: line {number} has no text field {column!r}")
            yield value
