"""`cohort explorer`: index the coordinator on a cluster and serve the run explorer."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import click
from solders.pubkey import Pubkey

from ..cli_common import chain_options, run
from ..errors import ConfigError
from . import DEFAULT_PORT


@click.command("explorer")
@chain_options
@click.option("--port", "-p", type=click.IntRange(0, 65535), default=DEFAULT_PORT, show_default=True,
              help="HTTP port (0: any free port).")  # fmt: skip
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on. Anything but loopback exposes the explorer to the network.")  # fmt: skip
@click.option("--db", "db", type=click.Path(dir_okay=False, path_type=Path),
              default=Path("cohort-explorer.sqlite"), show_default=True,
              help="SQLite database (created if absent; indexing resumes where it stopped).")  # fmt: skip
@click.option("--also-program", "extra", multiple=True,
              help="Another coordinator program id to index beside the default one (repeatable).")  # fmt: skip
@click.option("--poll-interval", type=click.FloatRange(0.1, 600), default=3.0, show_default=True,
              help="Seconds between polls when no websocket notification arrives.")  # fmt: skip
@click.option("--treasurer-id", envvar="COHORT_TREASURER_ID", show_envvar=True,
              help="The treasurer whose treasuries are shown with their runs. Default: [programs.<cluster>] "
                   "treasurer, if any.")  # fmt: skip
def explorer(settings, port: int, host: str, db: Path, extra: tuple[str, ...],
             poll_interval: float, treasurer_id: str | None) -> None:  # fmt: skip
    """Index runs into SQLite and serve the run explorer (JSON API + live pages)."""
    from ..config import resolve_program_id
    from ..treasurer import PROGRAM_NAME
    from .app import Explorer
    from .store import StoreError

    programs = [settings.program_id()]
    try:
        treasurer = resolve_program_id(
            settings.workspace, settings.cluster, treasurer_id, PROGRAM_NAME
        )
    except ConfigError:
        if treasurer_id:
            raise  # a bad --treasurer-id is an error; no treasurer configured just shows no rewards
        treasurer = None
    for text in extra:
        try:
            programs.append(Pubkey.from_string(text))
        except ValueError:
            raise ConfigError(f"program id {text!r} is not a base58 address") from None
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")

    async def check_programs() -> None:
        """Refuse a program id that is not the coordinator (it would index nothing and show no runs); an
        RPC that is down is the indexer's to report and outlast, so the explorer starts anyway."""
        from ..errors import RpcRefused, RpcUnavailable
        from ..program_check import check_coordinator, probe_rpc

        async with settings.rpc() as rpc:
            try:
                await probe_rpc(rpc)
            except (RpcUnavailable, RpcRefused):
                return
            for program in programs:
                await check_coordinator(rpc, program, settings.cluster, rpc.idl)

    async def serve() -> None:
        await check_programs()
        try:
            ex = Explorer(settings.cluster.urls, settings.cluster.ws_url, programs, db, host, port,
                          poll_interval=poll_interval, treasurer_id=treasurer)  # fmt: skip
        except StoreError as e:
            raise ConfigError(str(e)) from None
        try:
            await ex.start()
        except OSError as e:
            await ex.stop()
            raise ConfigError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
        click.echo(f"explorer: {ex.url}  (indexing {', '.join(map(str, programs))} on "
                   f"{settings.cluster.urls[0]}; database {db})", err=True)  # fmt: skip
        try:
            await ex.serve_forever()
        finally:
            await ex.stop()

    try:
        run(serve())
    except (KeyboardInterrupt, asyncio.CancelledError):
        pass
