"""`cohort train --nproc-per-node N`: one member in N processes of this machine (its ranks), torchrun-style.

The launcher (the `cohort train` a user or a supervisor started) checks what it can before any rank starts:
N (1..64), and that the run exists and the chain answers (one line and the client's exit code otherwise). A
run that verifies results is trained like any other: rank 0 commits the member's optimizer state every step
(sharded.py), so its results are checked like a one-process member's, and it checks others' on its shards. Then it
starts the same command N times, each in a process group of its own, with torchrun's environment: RANK,
LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1 and MASTER_PORT (a free port). It forwards
SIGINT and SIGTERM to every rank's group (a second signal kills them), stops the others when a rank fails
(SIGTERM, then SIGKILL after LEAVE_GRACE), kills ranks that outlive rank 0 by LEAVE_GRACE, and exits with rank
0's code, non-zero when any rank failed. Ranks die with the launcher (PR_SET_PDEATHSIG), so a supervisor's
SIGKILL of it leaves no rank behind.

A `cohort train` that finds WORLD_SIZE > 1 in its environment (started by the launcher, or by torchrun with
--nnodes 1) is one rank: it joins the process group (gloo; NCCL for a GPU's tensors, gloo for objects and CPU
sums) whose every collective gives up after RANK_TIMEOUT, so a rank whose peers died fails instead of hanging
(rank 0 pings while idle, sharded.py, so a live member never waits that long). Rank 0 runs the client with a
ShardedReplica; the others run `serve_rank` and nothing else: no wallet, no chain, no peers. They ignore
SIGINT and SIGTERM, because rank 0 leads the leaving (it finishes the step in flight, which needs them, sends
its exit_run, then lets them go); one told to stop leaves on its own LEAVE_GRACE seconds later if rank 0 never
lets it go.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import TYPE_CHECKING

from .options import ClientOptions, ClientRefused, ExitCode

if TYPE_CHECKING:
    from .sharded import Leader

MAX_RANKS = 64
RANK_TIMEOUT = timedelta(
    minutes=5
)  # any collective; rank 0's pings (every 10 s) keep a live member far below
LEAVE_GRACE = (
    90  # seconds a rank may take to leave once told (rank 0: a step in flight, exit_run, closing)
)
POLL = 0.1  # seconds between the launcher's looks at its ranks

ClientRunner = Callable[
    [ClientOptions, "Leader | None"], int
]  # runs the client, returns its exit code


# -- a rank -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RankEnv:
    """This process's place in a member of several ranks, as torchrun describes it."""

    rank: int
    local_rank: int
    world: int

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] = os.environ) -> RankEnv | None:
        """None when this process is the whole member (no WORLD_SIZE, or 1); ValueError when the variables
        do not describe ranks of one machine."""
        raw = environ.get("WORLD_SIZE", "").strip()
        if not raw:
            return None
        try:
            world = int(raw)
            if world <= 1:
                return None
            rank = int(environ["RANK"])
            local_rank = int(environ.get("LOCAL_RANK", rank))
            local_world = int(environ.get("LOCAL_WORLD_SIZE", world))
        except KeyError:
            raise ValueError(
                "WORLD_SIZE is set but RANK is not (start the ranks with torchrun)"
            ) from None
        except ValueError:
            raise ValueError(
                "RANK, LOCAL_RANK, WORLD_SIZE and LOCAL_WORLD_SIZE must be integers"
            ) from None
        if world > MAX_RANKS:
            raise ValueError(f"a member spans at most {MAX_RANKS} processes, WORLD_SIZE is {world}")
        if local_world != world:  # a rank loads a checkpoint from rank 0's path: one file system
            raise ValueError("a member's ranks share one machine (torchrun --nnodes 1), but LOCAL_WORLD_SIZE "
                             f"{local_world} != WORLD_SIZE {world}")  # fmt: skip
        if not 0 <= rank < world or not 0 <= local_rank < world:
            raise ValueError(f"RANK {rank} and LOCAL_RANK {local_rank} must be in [0, {world})")
        for name in ("MASTER_ADDR", "MASTER_PORT"):
            if not environ.get(name):
                raise ValueError(
                    f"WORLD_SIZE is set but {name} is not (start the ranks with torchrun)"
                )
        return cls(rank, local_rank, world)


def member_ranks() -> int:
    """How many processes this member spans: its process group's size, 1 when none is up (torch is not
    imported to find out: a process that joined a group has it loaded already)."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return 1
    return dist.get_world_size()


def rank_device(device: str, local_rank: int) -> str:
    """The device of the rank with `local_rank`: a GPU each (cuda:LOCAL_RANK) for auto and cuda; an explicit
    cuda:N or cpu as given."""
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    return f"cuda:{local_rank}" if device == "cuda" else device


def join_group(ranks: RankEnv, device: str) -> None:
    """Join the member's process group (MASTER_ADDR/MASTER_PORT from the environment)."""
    import torch
    import torch.distributed as dist

    backend = "gloo"
    if device.startswith("cuda"):
        torch.cuda.set_device(torch.device(device))
        backend = (
            "cpu:gloo,cuda:nccl"  # the model's tensors over NCCL; objects and CPU sums over gloo
        )
    dist.init_process_group(backend, init_method="env://", rank=ranks.rank, world_size=ranks.world,
                            timeout=RANK_TIMEOUT)  # fmt: skip


def run_rank(ranks: RankEnv, options: ClientOptions, run_client: ClientRunner) -> int:
    """This process as one rank of a member: rank 0 runs the client (`run_client`, with the Leader of the
    other ranks), the others serve it. The exit code."""
    import torch.distributed as dist

    options = replace(options, device=rank_device(options.device, ranks.local_rank))
    if (
        options.lean_memory
    ):  # every rank gives freed memory back at once (a rank's 23 -> 13 B/param at 100M)
        from .memory import return_freed_memory

        return_freed_memory()
    if ranks.rank != 0:
        _leave_when_let_go()  # before the group: a signal while joining must not kill us either
    try:
        join_group(ranks, options.device)
    except Exception as e:  # another rank never came, or the address is taken
        print(
            f"Error: rank {ranks.rank} could not join its member's process group: {e}",
            file=sys.stderr,
        )
        return ExitCode.ERROR
    try:
        if ranks.rank == 0:
            return _lead(options, run_client)
        return _serve(ranks, options)
    finally:
        with contextlib.suppress(Exception):
            dist.destroy_process_group()


def _lead(options: ClientOptions, run_client: ClientRunner) -> int:
    from .sharded import leader

    lead = leader()  # pings from now on: the others wait while we connect and join
    try:
        code = run_client(options, lead)
    finally:
        lead.close()
    if (
        lead.lost is not None and code == ExitCode.OK
    ):  # the client left cleanly, but the member was broken
        print(
            f"Error: this member lost a rank: {type(lead.lost).__name__}: {lead.lost}"[:500],
            file=sys.stderr,
        )
        return ExitCode.ERROR
    return code


def _serve(ranks: RankEnv, options: ClientOptions) -> int:
    import torch

    from .sharded import serve_rank

    if options.threads:
        torch.set_num_threads(options.threads)
    try:
        serve_rank(device=options.device)
    except (
        Exception
    ) as e:  # rank 0 is gone (its end of the group closed or timed out), or an op failed here
        print(f"Error: rank {ranks.rank}: {type(e).__name__}: {e}"[:500], file=sys.stderr)
        return ExitCode.ERROR
    return ExitCode.OK


def _leave_when_let_go() -> None:
    """A rank other than 0 ignores SIGINT/SIGTERM (rank 0 leads the leaving, and needs it meanwhile), but
    ends LEAVE_GRACE seconds after one if rank 0 never lets it go (SIGALRM's default action)."""

    def told(_signum: int, _frame: object) -> None:
        if signal.getitimer(signal.ITIMER_REAL)[0] == 0:
            signal.alarm(LEAVE_GRACE)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, told)


# -- the launcher -----------------------------------------------------------------------------------
def check_launchable(options: ClientOptions) -> None:
    """ClientRefused (one line, an exit code) for a member of several ranks that cannot join the run: it
    does not exist, or the chain does not answer. Read once from the chain, before any rank starts."""
    asyncio.run(_check_run(options))


async def _check_run(options: ClientOptions) -> None:
    from solders.pubkey import Pubkey

    from cohort.sdk.client import RunClient
    from cohort.sdk.coordinator_core import load_idl
    from cohort.sdk.errors import CohortError, RpcUnavailable, RunNotFound
    from cohort.sdk.rpc import Rpc

    idl = load_idl()
    try:
        async with Rpc(list(options.cluster_urls), idl=idl) as rpc:
            chain = RunClient(
                rpc, Pubkey.from_string(options.program_id), ws_url=options.ws_url, idl=idl
            )
            await chain.fetch_run(options.run)
    except RunNotFound as e:
        raise ClientRefused(ExitCode.RUN_NOT_FOUND, str(e)) from None
    except (RpcUnavailable, CohortError) as e:
        raise ClientRefused(ExitCode.RPC_UNREACHABLE, str(e)) from None


def launch(nproc: int, argv: Sequence[str], *, grace: float = LEAVE_GRACE) -> int:
    """Start `cohort <argv>` as ranks 0..nproc-1 of one member on this machine, supervise them until all
    have exited (see the module's docstring) and return the member's exit code."""
    if not 2 <= nproc <= MAX_RANKS:
        raise ValueError(f"a member launches 2 to {MAX_RANKS} ranks, not {nproc}")
    common = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()),
              "WORLD_SIZE": str(nproc), "LOCAL_WORLD_SIZE": str(nproc), "GROUP_RANK": "0"}  # fmt: skip
    received: list[int] = []
    previous = {
        sig: signal.signal(sig, lambda s, _f: received.append(s))
        for sig in (signal.SIGINT, signal.SIGTERM)
    }
    ranks: list[subprocess.Popen] = []
    try:
        for rank in range(nproc):
            env = {**common, "RANK": str(rank), "LOCAL_RANK": str(rank)}
            # rank 0 told by SIGTERM still leaves the run cleanly; the others have nothing to save
            death = signal.SIGTERM if rank == 0 else signal.SIGKILL
            ranks.append(subprocess.Popen([sys.executable, "-m", "cohort.sdk.cli", *argv], env=env,
                                          start_new_session=True, preexec_fn=_dies_with(os.getpid(), death)))  # fmt: skip
        codes = _supervise(ranks, received, grace)
    finally:
        for process in ranks:  # whatever happened to us, no rank outlives the launcher
            if process.poll() is None:
                _signal_group(process, signal.SIGKILL)
                process.wait()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    first = codes[0]
    if first != 0:
        return (
            first if first > 0 else 128 - first
        )  # killed by signal n: 128 + n, as a shell reports it
    failed = [(rank, code) for rank, code in enumerate(codes) if code != 0]
    if failed:
        print(
            "Error: " + ", ".join(f"rank {r} exited with {c}" for r, c in failed), file=sys.stderr
        )
        return ExitCode.ERROR
    return ExitCode.OK


def _supervise(ranks: list[subprocess.Popen], received: list[int], grace: float) -> list[int]:
    """Wait for every rank, forwarding signals and stopping the rest once one fails; their exit codes."""
    deadline: float | None = None  # ranks still running then are killed
    failed: set[int] = set()
    signals = 0

    def stop_by(when: float) -> float:
        return when if deadline is None else min(deadline, when)

    while True:
        codes = [p.poll() for p in ranks]
        running = [p for p, c in zip(ranks, codes, strict=True) if c is None]
        if not running:
            return [c for c in codes if c is not None]
        now = time.monotonic()
        while received:
            sig = received.pop(0)
            signals += 1
            for process in running:  # a second signal: the user means it
                _signal_group(process, sig if signals == 1 else signal.SIGKILL)
            deadline = stop_by(now + grace)
        for rank, code in enumerate(codes):
            if code not in (None, 0) and rank not in failed:  # the member cannot go on without it
                failed.add(rank)
                for process in running:
                    _signal_group(process, signal.SIGTERM)
                deadline = stop_by(now + grace)
        if codes[0] is not None:  # rank 0 let the others go (or died): they follow, or are made to
            deadline = stop_by(now + grace)
        if deadline is not None and now > deadline:
            for process in running:
                _signal_group(process, signal.SIGKILL)
        time.sleep(POLL)


def _signal_group(process: subprocess.Popen, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)


def _dies_with(parent: int, sig: int) -> Callable[[], None] | None:
    """A child's preexec: it gets `sig` when the launcher dies (Linux; elsewhere the launcher's own cleanup
    is all there is)."""
    if not sys.platform.startswith("linux"):
        return None

    def arm() -> None:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(sig), 0, 0, 0)  # 1: PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the launcher died before we armed it
            os._exit(1)

    return arm


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
