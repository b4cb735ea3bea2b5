"""`cohort localnet start`: run a localnet until interrupted."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from pathlib import Path

import click

from .config import (
    DEFAULT_MAX_HISTORY,
    DEFAULT_PORT,
    DEFAULT_SLOT_MS,
    EXPLORER_ORIGIN,
    LocalnetConfig,
)


@click.group(name="localnet")
def localnet() -> None:
    """A local Solana cluster (LiteSVM behind the standard JSON-RPC and websocket API)."""


@localnet.command()
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on (::1 for IPv6); anything but loopback is warned about.",
)
@click.option(
    "--port",
    default=DEFAULT_PORT,
    show_default=True,
    type=click.IntRange(0, 65534),
    help="JSON-RPC port; websockets use port+1; 0 picks a free pair.",
)
@click.option(
    "--ledger",
    type=click.Path(file_okay=False, path_type=Path),
    help="Directory that makes the chain durable across restarts (in memory if omitted).",
)
@click.option("--reset", is_flag=True, help="Start the ledger over from genesis.")
@click.option(
    "--slot-ms",
    default=DEFAULT_SLOT_MS,
    show_default=True,
    type=click.IntRange(10, 60_000),
    help="Slot duration in milliseconds.",
)
@click.option(
    "--cheats",
    is_flag=True,
    help="Serve the test cheats localnet_warpTime, localnet_setAccount and localnet_snapshot.",
)
@click.option(
    "--cors-origin",
    "cors_origins",
    multiple=True,
    metavar="ORIGIN",
    help=f"Also let web pages from ORIGIN call (repeatable; '*' for any). {EXPLORER_ORIGIN} always may.",
)
@click.option(
    "--history",
    default=DEFAULT_MAX_HISTORY,
    show_default=True,
    type=click.IntRange(1),
    help="Landed transactions kept in memory (older ones are forgotten once expired).",
)
def start(
    host: str,
    port: int,
    ledger: Path | None,
    reset: bool,
    slot_ms: int,
    cheats: bool,
    cors_origins: tuple[str, ...],
    history: int,
) -> None:
    """Start the localnet and serve until Ctrl-C (or SIGTERM)."""
    try:
        config = LocalnetConfig(
            host=host,
            port=port,
            ledger=ledger,
            reset=reset,
            slot_ms=slot_ms,
            cheats=cheats,
            cors_origins=(EXPLORER_ORIGIN, *cors_origins),
            max_history=history,
        )
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        _run(_serve(config))
    except OSError as exc:
        raise click.ClickException(str(exc)) from None


def _run(main) -> None:
    """uvloop when available (the event loop is a good part of each request's cost), else asyncio."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
        return
    uvloop.run(main)


async def _serve(config: LocalnetConfig) -> None:
    from .server import Localnet  # heavy imports only when actually starting

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    net = Localnet(config)
    await net.start()
    assert net.node is not None
    where = f"ledger {config.ledger}" if config.ledger else "in memory (no --ledger)"
    click.echo(f"localnet: JSON-RPC {net.http_url}  websocket {net.ws_url}  ({where})", err=True)
    cheats = "cheats on (--cheats)" if config.cheats else "no cheats"
    click.echo(
        f"localnet: slot {net.node.bank.slot}, faucet via requestAirdrop, {cheats}; Ctrl-C stops",
        err=True,
    )
    try:
        await stop.wait()
    finally:
        await net.stop()
        click.echo("localnet: stopped", err=True)
