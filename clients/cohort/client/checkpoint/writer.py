"""Checkpoints written in a background thread, so the next epoch's training is not held up.

`submit` copies the weights to CPU memory on the caller's thread (milliseconds to seconds), then
one worker thread writes, hashes and renames while training goes on; the returned future gives
the CheckpointInfo (its manifest hash is what the `checkpoint` transaction carries). Saves run
one at a time, in submission order.
"""

from __future__ import annotations

import logging
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import torch
from tqdm import tqdm

from .layout import CheckpointInfo
from .save import DEFAULT_MAX_SHARD_BYTES, SavesFiles, snapshot, write_checkpoint

log = logging.getLogger(__name__)


class CheckpointWriter:
    def __init__(
        self,
        root: str | Path,
        *,
        keep_last: int = 3,
        max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
        progress_bar: bool = False,
    ) -> None:
        if keep_last < 1:
            raise ValueError(f"keep_last must be >= 1, got {keep_last}")
        self.root = Path(root)
        self.keep_last = keep_last
        self.max_shard_bytes = max_shard_bytes
        self.progress_bar = progress_bar
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint-writer")

    def submit(
        self,
        model: torch.nn.Module,
        *,
        run_id: str,
        step: int,
        epoch: int,
        tokenizer: SavesFiles | None = None,
    ) -> Future[CheckpointInfo]:
        snap = snapshot(model, run_id=run_id, step=step, epoch=epoch, tokenizer=tokenizer)

        def write() -> CheckpointInfo:
            bar = None
            if self.progress_bar:
                bar = tqdm(
                    total=snap.total_bytes, unit="B", unit_scale=True, desc=f"checkpoint {step}"
                )

            def progress(done: int, total: int) -> None:
                if bar is not None:
                    bar.update(done - bar.n)

            try:
                info = write_checkpoint(
                    snap,
                    self.root,
                    keep_last=self.keep_last,
                    max_shard_bytes=self.max_shard_bytes,
                    progress=progress,
                )
            except Exception:
                log.exception("checkpoint of step %d failed", step)
                raise
            finally:
                if bar is not None:
                    bar.close()
            log.info("checkpoint step %d at %s, manifest %s", step, info.path, info.manifest_hex)
            return info

        return self._pool.submit(write)

    def close(self, wait: bool = True) -> None:
        """Stop taking saves; by default wait for the pending ones (a checkpointer's shutdown)."""
        self._pool.shutdown(wait=wait, cancel_futures=not wait)

    def __enter__(self) -> CheckpointWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
