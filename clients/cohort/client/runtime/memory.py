"""Whether this machine can hold a run's model: the estimate of cohort.sdk.sizing against the memory the
training device has available, checked before anything is built, joined or sent."""

from __future__ import annotations

import os
from pathlib import Path

from cohort.sdk.models import RunConfig
from cohort.sdk.presets import TrainingSpec
from cohort.sdk.sizing import (
    GIB,
    MemoryEstimate,
    default_micro_batch_size,
    format_bytes,
    run_estimate,
)

from .options import ClientOptions, ClientRefused, ExitCode


def available_memory(device: str, meminfo: Path = Path("/proc/meminfo")) -> int:
    """Bytes the training device can still give: free CUDA memory on a GPU, MemAvailable (what the kernel
    can hand out without swapping) on the CPU."""
    if device.startswith("cuda"):
        import torch  # only a GPU member asks, and it loads torch to train anyway

        free, _total = torch.cuda.mem_get_info(torch.device(device))
        return int(free)
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        pass
    # no /proc (not Linux): free physical pages, a lower bound of what is available
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def largest_micro_batch(spec: TrainingSpec, config: RunConfig, available: int, upto: int, *,
                        checkpointed: bool = False, ranks: int = 1) -> int:  # fmt: skip
    """The most sequences per micro-batch (at most `upto`) whose estimate fits in `available`; 0: none."""
    best = 0
    lo, hi = 1, upto
    while lo <= hi:  # activations grow with the micro-batch, the rest does not
        mid = (lo + hi) // 2
        estimate = run_estimate(spec, config, mid, checkpointed=checkpointed, ranks=ranks)
        if estimate is not None and estimate.total <= available:
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    return best


def check_memory(
    spec: TrainingSpec, config: RunConfig, run_id: str, options: ClientOptions, ranks: int = 1
) -> MemoryEstimate | None:
    """The run's estimate on this member (on one of its `ranks`, with --lean-memory's activations when it is
    set); ClientRefused (one line) when the device cannot hold it. A synthetic member holds no model, and a
    model whose size is unknown (some HfAuto models) is not checked."""
    if options.synthetic:
        return None
    shape = {"checkpointed": options.lean_memory, "ranks": ranks}
    estimate = run_estimate(spec, config, options.micro_batch_size, **shape)
    if estimate is None:
        return None
    if options.memory_limit is not None:
        available = int(options.memory_limit * GIB)
        where = f"--memory-limit allows {format_bytes(available)}"
    else:
        device = options.torch_device()
        available = available_memory(device)
        where = f"{device} has {format_bytes(available)} available"
    if estimate.total <= available:
        return estimate
    hint = ""
    share = options.micro_batch_size or default_micro_batch_size(config)
    fits = largest_micro_batch(spec, config, available, share - 1, **shape) if share > 1 else 0
    if fits:
        hint = f"; --micro-batch-size {fits} would fit"
    elif estimate.untrainable:
        hint = f"; {estimate.untrainable}"
    elif not options.lean_memory:
        hint = "; --lean-memory holds less (the activations of one layer at a time)"
    raise ClientRefused(ExitCode.TOO_LITTLE_MEMORY,
                        f"run {run_id!r} ({spec.preset}) cannot be trained here: {estimate.summary()}, and "
                        f"{where}{hint}")  # fmt: skip


# glibc's mallopt parameter that fixes the size from which malloc maps memory of its own (and unmaps it when
# freed); fixing it also stops glibc from raising it on its own as big blocks are freed
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 1 << 20


def return_freed_memory(threshold: int = MMAP_THRESHOLD) -> bool:
    """Make every allocation of `threshold` bytes or more (tensors of a model's size) its own mapping, given
    back to the system the moment it is freed. By default glibc raises that threshold up to 32 MiB as big
    blocks are freed, after which a training step's gradients, activations and DisTrO temporaries come from
    its heap and stay resident, fragmented, after they are freed: ~1.5 B/param of a 400M member
    (benchmarks/client/memory.py). False where the C library is not glibc (nothing changes there)."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return mallopt(_M_MMAP_THRESHOLD, int(threshold)) == 1
