"""Whether this machine's disk can hold what a member of a run keeps there: the estimate of
cohort.sdk.sizing (checkpoints; while the run verifies, weight snapshots and committed states) against the
free space where the member writes them, checked before anything is built, joined or sent. A member that
fills its disk mid-epoch loses its checkpoint and its place in the run; one line at the start costs nothing."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from cohort.sdk.models import RunConfig
from cohort.sdk.presets import TrainingSpec
from cohort.sdk.sizing import DiskEstimate, estimate_disk, format_bytes, parameter_count

from .options import ClientOptions, ClientRefused, ExitCode


def cache_root() -> Path:
    """The user's cache folder of cohort: members' checkpoints and scratch live under it by default."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "cohort"


def member_root(options: ClientOptions) -> Path:
    """Where a member writes its checkpoints and what verification keeps (default: the user's cache)."""
    return options.checkpoint_dir if options.checkpoint_dir is not None else cache_root()


def free_space(root: Path) -> tuple[int, Path]:
    """Free bytes on the file system `root` is (or will be) on, and the existing directory measured."""
    existing = next((p for p in (root, *root.parents) if p.exists()), Path("/"))
    return shutil.disk_usage(existing).free, existing


def disk_estimate(spec: TrainingSpec, config: RunConfig) -> DiskEstimate | None:
    """What a member of this run keeps on disk; None when the model's size is not known."""
    params = parameter_count(spec)
    return None if params is None else estimate_disk(params, config.verification_percent)


def check_disk(
    spec: TrainingSpec, config: RunConfig, run_id: str, options: ClientOptions
) -> DiskEstimate | None:
    """The run's disk estimate on this member; ClientRefused (one line) when the file system under its
    checkpoint directory has less free. A synthetic member keeps no weights, and a model whose size is not
    known is not checked."""
    estimate = None if options.synthetic else disk_estimate(spec, config)
    if estimate is None:
        return None
    free, existing = free_space(member_root(options))
    if estimate.total <= free:
        return estimate
    raise ClientRefused(ExitCode.TOO_LITTLE_DISK,
                        f"run {run_id!r} ({spec.preset}) cannot be trained here: a member keeps "
                        f"{estimate.summary()}, and {existing} has {format_bytes(free)} free "
                        "(--checkpoint-dir on a larger disk)")  # fmt: skip
