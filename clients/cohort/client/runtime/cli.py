"""`cohort train --run RUN`: join a run and train until it finishes or you stop it (Ctrl-C leaves cleanly).

Every flag has an environment variable (COHORT_*) so a supervisor or container can configure the client
without a command line. A refusal (unknown run, paused run, not authorized, full, unfunded wallet,
unreachable RPC, wrong client version, a device too small for the run's model) is one line on stderr and a
distinct exit code (see ExitCode).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import click

from cohort.sdk.cli_common import Settings, chain_options
from cohort.sdk.errors import CohortError

from .options import ClientOptions, ExitCode


@click.command("train")
@click.option("--run", "run_id", required=True, envvar="COHORT_RUN", show_envvar=True, help="Run id or address.")
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
@chain_options
def train(settings: Settings, run_id: str, device: str, p2p: str, bind: str, relays: tuple[str, ...],
          micro_batch_size: int | None, memory_limit: float | None, checkpoint_dir: Path | None, logs: str,
          events: Path | None, threads: int | None, name: str, synthetic: bool, synthetic_seconds: float,
          slowdown: float) -> None:  # fmt: skip
    """Join a run and train in it with this wallet."""
    from . import Client

    try:
        options = ClientOptions(
            run=run_id, wallet=settings.wallet_path, cluster_urls=settings.cluster.urls,
            program_id=str(settings.program_id()), ws_url=settings.cluster.ws_url, device=device, p2p=p2p,
            bind=bind, relays=relays, micro_batch_size=micro_batch_size, memory_limit=memory_limit,
            checkpoint_dir=checkpoint_dir, logs=logs, events=events, threads=threads, name=name,
            synthetic=synthetic, synthetic_seconds=synthetic_seconds, slowdown=slowdown,
        )  # fmt: skip
    except ValueError as e:
        raise click.UsageError(str(e)) from None
    except CohortError as e:
        raise click.ClickException(str(e)) from None
    client = Client(options)
    code = asyncio.run(client.run())
    if code != ExitCode.OK:
        reason = getattr(client, "refusal", None)
        click.echo(f"Error: {reason}" if reason else f"Error: the client stopped ({code.name})", err=True)
    raise SystemExit(int(code))
