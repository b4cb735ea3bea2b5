"""`cohort train --run RUN`: join a run and train until it finishes or you stop it (Ctrl-C leaves cleanly).

Every flag has an environment variable (COHORT_*) so a supervisor or container can configure the client
without a command line. A refusal (unknown run, paused run, not authorized, full, unfunded wallet,
unreachable RPC, wrong client version, a device too small for the run's model) is one line on stderr and a
distinct exit code (see ExitCode).

`--nproc-per-node N` makes one member of N local processes (launch.py): this process starts and supervises
the ranks. A `cohort train` started with WORLD_SIZE > 1 in its environment (by that launcher or by torchrun)
is one of those ranks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from cohort.sdk.cli_common import Settings, chain_options
from cohort.sdk.errors import CohortError

from .launch import MAX_RANKS, RankEnv, check_launchable, launch, run_rank
from .options import ClientOptions, ClientRefused, ExitCode

if TYPE_CHECKING:
    from .sharded import Leader

LOST_GRACE = 15.0  # seconds a member that lost a rank waits for its client's clean leave before it just leaves


@click.command("train")
@click.option(
    "--run",
    "run_id",
    required=True,
    envvar="COHORT_RUN",
    show_envvar=True,
    help="Run id or address.",
)
@click.option("--device", default="auto", envvar="COHORT_DEVICE", show_envvar=True,
              help="auto | cpu | cuda | cuda:N.")  # fmt: skip
@click.option("--p2p", type=click.Choice(["iroh", "http"]), default="iroh", envvar="COHORT_P2P",
              show_envvar=True, help="Peer-to-peer transport.")  # fmt: skip
@click.option("--bind", default="127.0.0.1:0", envvar="COHORT_BIND", show_envvar=True,
              help="HOST:PORT the P2P node listens on (port 0 = any free one).")  # fmt: skip
@click.option("--relay", "relays", multiple=True, envvar="COHORT_RELAYS", show_envvar=True,
              help="iroh relay URL for peers behind NAT (repeatable).")  # fmt: skip
@click.option("--micro-batch-size", type=int, envvar="COHORT_MICRO_BATCH_SIZE", show_envvar=True,
              help="Sequences per forward/backward (gradient accumulation); default: the whole batch.")  # fmt: skip
@click.option("--memory-limit", type=float, metavar="GIB", envvar="COHORT_MEMORY_LIMIT", show_envvar=True,
              help="GiB this member may use (default: what the device has available); the client refuses a run "
                   "that needs more.")  # fmt: skip
@click.option("--lean-memory", is_flag=True, envvar="COHORT_LEAN_MEMORY", show_envvar=True,
              help="Hold less: recompute each layer's activations in the backward and give freed memory back "
                   "to the system at once (same results, bit for bit; ~1.5x the step time on a CPU).")  # fmt: skip
@click.option("--checkpoint-dir", type=click.Path(file_okay=False, path_type=Path),
              envvar="COHORT_CHECKPOINT_DIR", show_envvar=True, help="Where a checkpointer writes checkpoints.")  # fmt: skip
@click.option("--logs", type=click.Choice(["console", "json", "none"]), default="console",
              envvar="COHORT_LOGS", show_envvar=True, help="What goes to stdout.")  # fmt: skip
@click.option("--events", type=click.Path(dir_okay=False, path_type=Path), envvar="COHORT_EVENTS",
              show_envvar=True, help="Append structured events (JSON lines) to this file.")  # fmt: skip
@click.option("--threads", type=int, envvar="COHORT_THREADS", show_envvar=True,
              help="CPU threads for torch (default: torch's choice).")  # fmt: skip
@click.option("--name", default="", envvar="COHORT_NAME", help="Label shown before console lines.")
@click.option("--synthetic", is_flag=True, envvar="COHORT_SYNTHETIC",
              help="PROTOCOL TESTS ONLY: do not train; send payloads of the real model's size (rounds, bytes "
                   "and RPC load at scale).")  # fmt: skip
@click.option("--synthetic-seconds", type=float, default=0.0, envvar="COHORT_SYNTHETIC_SECONDS",
              help="With --synthetic: seconds a step takes per sequence of its batch.")  # fmt: skip
@click.option("--slowdown", type=float, default=1.0, envvar="COHORT_SLOWDOWN",
              help="BENCHMARKS: emulate a machine this many times slower (each step sleeps the difference).")  # fmt: skip
@click.option("--nproc-per-node", type=click.IntRange(1, MAX_RANKS), default=1, show_default=True,
              envvar="COHORT_NPROC_PER_NODE", show_envvar=True,
              help="Processes of this member on this machine (torch.distributed ranks, the model sharded over "
                   "them: a GPU each with --device cuda); started like torchrun.")  # fmt: skip
@click.option("--hub-repo", metavar="OWNER/NAME", envvar="COHORT_HUB_REPO", show_envvar=True,
              help="As one of the run's checkpointers: upload each epoch's checkpoint to this Hugging Face repo "
                   "(a write token in HF_TOKEN; HF_ENDPOINT for another Hub) and point the run's checkpoint "
                   "record at the uploaded revision, so joiners can load it when no peer serves it.")  # fmt: skip
@click.option("--metrics", "metrics_dir", type=click.Path(file_okay=False, path_type=Path), envvar="COHORT_METRICS",
              show_envvar=True, help="Write training and network metrics as TensorBoard event files here.")  # fmt: skip
@click.option("--metrics-port", type=click.IntRange(0, 65535), envvar="COHORT_METRICS_PORT", show_envvar=True,
              help="Serve the same metrics as OpenMetrics text at http://127.0.0.1:PORT/metrics (0: any free "
                   "port, said in a `metrics_served` event).")  # fmt: skip
@chain_options
def train(settings: Settings, run_id: str, device: str, p2p: str, bind: str, relays: tuple[str, ...],
          micro_batch_size: int | None, memory_limit: float | None, lean_memory: bool, checkpoint_dir: Path | None,
          logs: str, events: Path | None, threads: int | None, name: str, synthetic: bool, synthetic_seconds: float,
          slowdown: float, nproc_per_node: int, hub_repo: str | None = None, metrics_dir: Path | None = None,
          metrics_port: int | None = None) -> None:  # fmt: skip
    """Join a run and train in it with this wallet."""
    if (
        hub_repo is not None
    ):  # a bad repo id or a missing token: one line now, not at the first epoch's end
        from ..checkpoint.hub import HubUpload
        from ..checkpoint.layout import CheckpointError

        try:
            HubUpload.from_options(hub_repo)
        except CheckpointError as e:
            raise click.UsageError(str(e)) from None
    try:
        ranks = RankEnv.from_environ()
    except ValueError as e:
        raise click.UsageError(str(e)) from None
    spans = ranks is not None or nproc_per_node > 1
    if spans and synthetic:
        raise click.UsageError("--synthetic holds no model: a synthetic member is one process")
    if ranks is None and nproc_per_node > 1 and device.startswith("cuda:"):
        raise click.UsageError(f"--device {device} names one GPU for all {nproc_per_node} processes: use "
                               "--device cuda (rank k trains on cuda:k)")  # fmt: skip
    try:
        options = ClientOptions(
            run=run_id, wallet=settings.wallet_path, cluster_urls=settings.cluster.urls,
            program_id=str(settings.program_id()), ws_url=settings.cluster.ws_url, device=device, p2p=p2p,
            bind=bind, relays=relays, micro_batch_size=micro_batch_size, memory_limit=memory_limit,
            lean_memory=lean_memory, checkpoint_dir=checkpoint_dir, logs=logs, events=events, threads=threads, name=name,
            synthetic=synthetic, synthetic_seconds=synthetic_seconds, slowdown=slowdown, hub_repo=hub_repo,
            metrics_dir=metrics_dir, metrics_port=metrics_port,
        )  # fmt: skip
    except ValueError as e:
        raise click.UsageError(str(e)) from None
    except CohortError as e:
        raise click.ClickException(str(e)) from None
    if ranks is not None:  # one rank of a member (started by the launcher below, or by torchrun)
        code = int(run_rank(ranks, options, _run_client))
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        # the group is torn down and everything said: skip the interpreter's teardown, where gloo's threads can
        # still abort a clean exit ("terminate called without an active exception")
        os._exit(code)
    if nproc_per_node > 1:
        try:
            check_launchable(options)  # before any rank starts
        except ClientRefused as refusal:
            click.echo(f"Error: {refusal}", err=True)
            raise SystemExit(int(refusal.code)) from None
        raise SystemExit(int(launch(nproc_per_node, _rank_argv(click.get_current_context()))))
    raise SystemExit(_run_client(options, None))


def _run_client(options: ClientOptions, leader: Leader | None) -> int:
    """The client until it finishes; its exit code (a refusal or failure said in one line on stderr). With
    the `leader` of a member's other ranks, losing one of them makes the client leave the run."""
    from . import Client
    from .machine import LeaveEpoch

    client = Client(options)
    kept: set[asyncio.Task] = set()

    async def leave_without_ranks(error: BaseException) -> None:
        client.stop()  # a clean leave (exit_run), once the member's jobs in flight have failed
        await asyncio.sleep(LOST_GRACE)
        # still here: a model job that failed with the ranks is one the machine still waits for
        with contextlib.suppress(
            Exception
        ):  # exit_run if the RPC answers in time: the chain need not drop us
            await asyncio.wait_for(
                client.effects.leave(LeaveEpoch(None, "this member lost a rank")), LOST_GRACE
            )
        client.post(ClientRefused(ExitCode.ERROR, f"this member lost a rank: {error}"[:300]))

    async def run() -> ExitCode:
        if leader is not None:
            loop = asyncio.get_running_loop()

            def lost(error: BaseException) -> None:  # on the thread that found out
                loop.call_soon_threadsafe(
                    lambda: kept.add(asyncio.ensure_future(leave_without_ranks(error)))
                )

            leader.on_lost = lost
        return await client.run()

    code = asyncio.run(run())
    if code != ExitCode.OK:
        reason = getattr(client, "refusal", None)
        click.echo(
            f"Error: {reason}" if reason else f"Error: the client stopped ({code.name})", err=True
        )
    return int(code)


def _rank_argv(ctx: click.Context) -> list[str]:
    """This command as each rank runs it: every option as this process resolved it (flags, environment or
    defaults), so the ranks read the same settings whatever their environment adds."""
    argv = [ctx.info_name or "train"]
    for param in ctx.command.params:
        value = ctx.params.get(param.name or "")
        if not isinstance(param, click.Option) or value is None or param.name == "nproc_per_node":
            continue
        flag = max(param.opts, key=len)  # the long form
        if param.is_flag:
            argv += [flag] if value else []
        elif param.multiple:
            for item in value:
                argv += [flag, str(item)]
        else:
            argv += [flag, str(value)]
    return argv
