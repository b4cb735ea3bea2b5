"""`cohort deploy`: deploy (or upgrade) the coordinator over RPC, price a deploy, refund abandoned buffers."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from . import artifacts
from .cli_common import Settings, chain_options, run
from .config import PROGRAM_NAME, record_deployment
from .wallet import sol

LOCAL_CONCURRENCY = 16  # writes in flight against a cluster on this machine
REMOTE_CONCURRENCY = 4  # against a public cluster: a start its rate limits take (it adapts from there)


def default_concurrency(url: str) -> int:
    host = urlsplit(url).hostname or ""
    return LOCAL_CONCURRENCY if host in ("127.0.0.1", "localhost", "::1") else REMOTE_CONCURRENCY


def default_program_keypair(settings: Settings) -> Path:
    """Beside the build output in a checkout (as before); else in the workspace's untracked state folder."""
    if artifacts.in_checkout():
        return artifacts.CHECKOUT_CONTRACTS / "target" / f"{PROGRAM_NAME}-keypair.json"
    return settings.workspace.state_dir / f"{PROGRAM_NAME}-keypair.json"


@click.command()
@click.option("--program-keypair", type=click.Path(dir_okay=False, path_type=Path),
              help="The program's keypair (its address is the program id); created if missing. "
                   "Default: contracts/target/coordinator-keypair.json in a checkout, else "
                   ".cohort/ beside the Anchorfile (or ~/.config/cohort/).")  # fmt: skip
@click.option("--no-build", is_flag=True, help="Deploy the built (or packaged) program as it is.")
@click.option("--dry-run", is_flag=True,
              help="Send nothing: print what the deploy would send and cost (rent, fees).")  # fmt: skip
@click.option("--close-buffers", is_flag=True,
              help="Deploy nothing: close every loader buffer of the wallet (abandoned deploys) and "
                   "refund its rent.")  # fmt: skip
@click.option("--concurrency", type=click.IntRange(1, 64),
              help="Writes in flight to start with; halves whenever the cluster rate-limits. "
                   f"Default: {LOCAL_CONCURRENCY} on this machine, {REMOTE_CONCURRENCY} elsewhere.")  # fmt: skip
@chain_options
def deploy(settings: Settings, program_keypair: Path | None, no_build: bool, dry_run: bool,
           close_buffers: bool, concurrency: int | None) -> None:  # fmt: skip
    """Deploy the coordinator program to a cluster (localnet by default; --cluster devnet for devnet).

    Writes go out concurrently; an interrupted deploy resumes where it stopped when run again. Deploying
    again upgrades the program in place. The program id is recorded in an untracked local file
    (.cohort/programs.toml beside the Anchorfile), which every command reads; the Anchorfile is not changed.
    """
    from .deploy import close_buffers as close_all
    from .deploy import deploy_program, plan_deploy_cost

    payer = settings.keypair()
    keypair_path = program_keypair or default_program_keypair(settings)
    console = Console(stderr=True)

    if close_buffers:

        async def close():
            async with settings.rpc() as rpc:
                return await close_all(rpc, payer)

        closed = run(close())
        for buffer in closed:
            click.echo(f"closed buffer {buffer.address} ({sol(buffer.lamports)})")
        total = sum(b.lamports for b in closed)
        click.echo(f"closed {len(closed)} buffer(s) of {payer.pubkey()}, refunded {sol(total)}")
        return

    async def main():
        async with settings.rpc() as rpc:
            # fail fast, before building, when the cluster is unreachable
            await rpc.balance(payer.pubkey())
            elf = artifacts.program(build=not no_build).read_bytes()
            if dry_run:
                return await plan_deploy_cost(rpc, payer.pubkey(), elf, keypair_path)
            with Progress(
                TextColumn("writing"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                console=console, transient=True, disable=not console.is_terminal,
            ) as bar:  # fmt: skip
                task = bar.add_task("write", total=None)
                return await deploy_program(
                    rpc, payer, elf, keypair_path,
                    progress=lambda done, total: bar.update(task, completed=done, total=total),
                    concurrency=concurrency or default_concurrency(rpc.url),
                )  # fmt: skip

    result = run(main())
    if dry_run:
        _print_cost(settings, result, payer)
        return
    verb = "upgraded" if result.upgraded else "deployed"
    resumed = f", {result.writes_skipped} already written" if result.writes_skipped else ""
    click.echo(
        f"{verb} {PROGRAM_NAME} ({result.elf_size} bytes, {result.writes_sent} writes{resumed}) "
        f"on {settings.cluster.name} in {result.seconds:.1f} s"
    )
    if result.throttled:
        pace = f", requests to {result.lowest_rate:.1f}/s" if result.lowest_rate else ""
        click.echo(f"the cluster rate-limited {result.throttled} request(s): "
                   f"writes in flight went down to {result.lowest_concurrency}{pace}")  # fmt: skip
    if result.refunded:
        click.echo(f"closed a buffer of an earlier, different ELF: refunded {sol(result.refunded)}")
    saved = record_deployment(settings.workspace, settings.cluster.name, result.program_id)
    click.echo(f"program id {result.program_id} (saved in {saved} [programs.{settings.cluster.name}])")


def _print_cost(settings: Settings, cost, payer) -> None:
    program = (f"{cost.program_id} ({'upgrade' if cost.upgrade else 'new'})"
               if cost.program_id else "a new program (its keypair is created when deploying)")  # fmt: skip
    resumed = f", {cost.writes_done} of {cost.writes} already in a buffer" if cost.writes_done else ""
    lines = [
        f"dry run, nothing sent: deploying {PROGRAM_NAME} ({cost.elf_size} bytes) to "
        f"{settings.cluster.name} ({settings.cluster.url})",
        f"  program           {program}",
        f"  transactions      {cost.transactions} ({cost.writes - cost.writes_done} writes{resumed})",
        f"  buffer rent       {sol(cost.buffer_rent)} (held while writing, back when the deploy completes)",
        f"  program data rent {sol(cost.programdata_rent)} (room for twice the ELF, so it can grow)",
        f"  program rent      {sol(cost.program_rent)}",
        f"  fees              {sol(cost.fees)} (5000 lamports a signature)",
    ]
    if cost.stale_buffer_refund:
        lines.append(f"  refund            {sol(cost.stale_buffer_refund)} (a buffer of an earlier ELF, closed first)")
    short = cost.needed - cost.balance - cost.stale_buffer_refund
    verdict = "enough" if short <= 0 else f"short by {sol(short)}"
    lines += [
        f"  needs up front    {sol(cost.needed)}; costs {sol(cost.spent)} in the end",
        f"  wallet            {payer.pubkey()} holds {sol(cost.balance)} ({verdict})",
    ]
    click.echo("\n".join(lines))
