"""The client's settings: one dataclass, filled from flags or environment variables (a supervisor or a
container sets those), and the exit codes a supervisor can act on."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path


class ExitCode(enum.IntEnum):
    OK = 0  # the run finished, or we left on request
    ERROR = 1  # unexpected failure
    USAGE = 2  # bad flags or files
    RUN_NOT_FOUND = 3
    RUN_HALTED = 4  # paused (and not coming back within the wait) or finished before we joined
    NOT_AUTHORIZED = 5
    RUN_FULL = 6
    UNFUNDED = 7
    RPC_UNREACHABLE = 8
    DATA_UNAVAILABLE = 9  # the run's model or data cannot be built or read here
    VERSION_MISMATCH = 10  # Psyche's code: the supervisor should update the client
    TOO_LITTLE_MEMORY = 11  # the device cannot hold the run's model with these settings
    TOO_LITTLE_DISK = 12  # the disk under the checkpoint directory cannot hold what a member keeps


class ClientRefused(Exception):
    """A reason not to (keep) training that a user must act on: one line and an exit code."""

    def __init__(self, code: ExitCode, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class ClientOptions:
    run: str  # run id or Run account address
    wallet: Path
    cluster_urls: tuple[str, ...]
    program_id: str
    ws_url: str | None = None
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    p2p: str = "iroh"  # iroh | http
    bind: str = "127.0.0.1:0"
    relays: tuple[str, ...] = ()  # iroh relay URLs, for peers behind NAT on the internet
    micro_batch_size: int | None = None
    memory_limit: float | None = (
        None  # GiB a member may use (default: what the device has available)
    )
    lean_memory: bool = (
        False  # recompute activations, give freed memory back at once: less memory, more time
    )
    checkpoint_dir: Path | None = None
    logs: str = "console"  # console | json | none
    events: Path | None = None
    threads: int | None = None  # torch CPU threads
    client_version: str = "0.1.0"
    name: str = ""  # shown before console lines (several clients in one terminal)
    synthetic: bool = (
        False  # PROTOCOL TESTS ONLY: no training, payloads of the real size (synthetic.py)
    )
    synthetic_seconds: float = 0.0  # what a synthetic step takes per sequence of its batch
    slowdown: float = 1.0  # BENCHMARKS: every step takes this many times its compute (slowdown.py)
    hub_repo: str | None = (
        None  # a checkpointer's Hugging Face repo (owner/name) for each epoch's checkpoint
    )
    metrics_dir: Path | None = None  # TensorBoard event files (metrics.py)
    metrics_port: int | None = None  # OpenMetrics text on 127.0.0.1:PORT/metrics (0: any free port)

    def __post_init__(self) -> None:
        if self.p2p not in ("iroh", "http"):
            raise ValueError(f"--p2p must be iroh or http, got {self.p2p!r}")
        if self.logs not in ("console", "json", "none"):
            raise ValueError(f"--logs must be console, json or none, got {self.logs!r}")
        if not (self.device in ("auto", "cpu", "cuda") or self.device.startswith("cuda:")):
            raise ValueError(f"--device must be auto, cpu, cuda or cuda:N, got {self.device!r}")
        host, sep, port = self.bind.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
            raise ValueError(f"--bind must be HOST:PORT, got {self.bind!r}")
        if self.micro_batch_size is not None and self.micro_batch_size < 1:
            raise ValueError(f"--micro-batch-size must be >= 1, got {self.micro_batch_size}")
        if self.memory_limit is not None and not self.memory_limit > 0:
            raise ValueError(f"--memory-limit must be > 0 GiB, got {self.memory_limit}")
        if not 0 <= self.synthetic_seconds <= 3600:
            raise ValueError(
                f"--synthetic-seconds must be in [0, 3600], got {self.synthetic_seconds}"
            )
        if not 1 <= self.slowdown <= 100:
            raise ValueError(f"--slowdown must be in [1, 100], got {self.slowdown}")
        if self.metrics_port is not None and not 0 <= self.metrics_port < 65536:
            raise ValueError(f"--metrics-port must be in [0, 65535], got {self.metrics_port}")

    @property
    def bind_host(self) -> str:
        return self.bind.rpartition(":")[0].strip("[]")

    @property
    def bind_port(self) -> int:
        return int(self.bind.rpartition(":")[2])

    def torch_device(self) -> str:
        if self.device != "auto":
            return self.device
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
