"""`cohort deploy`: deploy (or upgrade) programs over RPC, price a deploy, refund abandoned buffers.

Every program cohort ships (`artifacts.programs()`) deploys the same way; `--program NAME` picks which. The
default is the coordinator alone: every run needs it, while each other program (and what it costs in rent on
a public cluster) is wanted only by the runs that use it, so it is deployed when asked for (`--program NAME`
or `--all`), and a command that needs its id says so.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from urllib.parse import urlsplit

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from . import artifacts
from .cli_common import Settings, chain_options, echo_json, json_option, run
from .config import PROGRAM_NAME, record_deployment
from .errors import ConfigError
from .wallet import sol

LOCAL_CONCURRENCY = 16  # writes in flight against a cluster on this machine
REMOTE_CONCURRENCY = (
    4  # against a public cluster: a start its rate limits take (it adapts from there)
)


def default_concurrency(url: str) -> int:
    host = urlsplit(url).hostname or ""
    return LOCAL_CONCURRENCY if host in ("127.0.0.1", "localhost", "::1") else REMOTE_CONCURRENCY


def default_program_keypair(settings: Settings, program: str = PROGRAM_NAME) -> Path:
    """Beside the build output in a checkout (as before); else in the workspace's untracked state folder."""
    name = artifacts.describe(program).keypair_file
    if artifacts.in_checkout():
        return artifacts.CHECKOUT_TARGET / name
    return settings.workspace.state_dir / name


def chosen_programs(names: tuple[str, ...], everything: bool) -> list[str]:
    """The programs a deploy is about: the named ones, every shipped one (--all), else the coordinator."""
    shipped = [m.name for m in artifacts.programs()]
    if everything:
        return shipped
    for name in names:
        artifacts.describe(name)  # an unknown name: the error lists the known ones
    return list(dict.fromkeys(names)) or [PROGRAM_NAME]


@click.command()
@click.option("--program", "program_names", multiple=True, metavar="NAME",
              help="The program to deploy (repeatable). Default: coordinator.")  # fmt: skip
@click.option("--all", "all_programs", is_flag=True, help="Deploy every program cohort ships.")
@click.option("--program-keypair", type=click.Path(dir_okay=False, path_type=Path),
              help="The program's keypair (its address is the program id); created if missing. With one "
                   "program only. Default: contracts/target/<name>-keypair.json in a checkout, else "
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
@json_option
@chain_options
def deploy(settings: Settings, program_names: tuple[str, ...], all_programs: bool,
           program_keypair: Path | None, no_build: bool, dry_run: bool, close_buffers: bool,
           concurrency: int | None, as_json: bool) -> None:  # fmt: skip
    """Deploy the coordinator program (or --program NAME, --all) to a cluster (localnet by default;
    --cluster devnet for devnet).

    Writes go out concurrently; an interrupted deploy resumes where it stopped when run again. Deploying
    again upgrades the program in place. The program id is recorded in an untracked local file
    (.cohort/programs.toml beside the Anchorfile), which every command reads; the Anchorfile is not changed.
    """
    from .deploy import close_buffers as close_all

    payer = settings.keypair()
    console = Console(stderr=True)

    if close_buffers:

        async def close():
            async with settings.rpc() as rpc:
                return await close_all(rpc, payer)

        closed = run(close())
        total = sum(b.lamports for b in closed)
        if as_json:
            echo_json({"wallet": payer.pubkey(), "refunded_lamports": total,
                       "buffers": [{"address": b.address, "lamports": b.lamports} for b in closed]})  # fmt: skip
            return
        for buffer in closed:
            click.echo(f"closed buffer {buffer.address} ({sol(buffer.lamports)})")
        click.echo(f"closed {len(closed)} buffer(s) of {payer.pubkey()}, refunded {sol(total)}")
        return

    names = chosen_programs(program_names, all_programs)
    if program_keypair is not None and len(names) != 1:
        raise ConfigError(
            "--program-keypair is one program's keypair: name that program with --program"
        )
    done = []
    for name in names:
        keypair_path = program_keypair or default_program_keypair(settings, name)
        done.append(_deploy_one(settings, name, keypair_path, payer, console, no_build=no_build, dry_run=dry_run,
                                concurrency=concurrency, quiet=as_json))  # fmt: skip
    if as_json:
        echo_json(done)


def _deploy_one(settings: Settings, name: str, keypair_path: Path, payer, console: Console, *,
                no_build: bool, dry_run: bool, concurrency: int | None, quiet: bool = False) -> dict:  # fmt: skip
    """Deploy (or plan) one program; what it did, as `--json` prints it (printed as lines unless `quiet`)."""
    from .deploy import deploy_program, plan_deploy_cost

    async def main():
        async with settings.rpc() as rpc:
            # fail fast, before building, when the cluster is unreachable
            await rpc.balance(payer.pubkey())
            elf = artifacts.program(build=not no_build, name=name).read_bytes()
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
        if not quiet:
            _print_cost(settings, name, result, payer)
        return {
            "program": name,
            "cluster": settings.cluster.name,
            "dry_run": True,
            **asdict(result),
            "needed": result.needed,
            "spent": result.spent,
        }  # lamports
    saved = record_deployment(settings.workspace, settings.cluster.name, result.program_id, name)
    out = {
        "program": name,
        "cluster": settings.cluster.name,
        "dry_run": False,
        "saved_in": saved,
        **asdict(result),
    }
    if quiet:
        return out
    verb = "upgraded" if result.upgraded else "deployed"
    resumed = f", {result.writes_skipped} already written" if result.writes_skipped else ""
    click.echo(
        f"{verb} {name} ({result.elf_size} bytes, {result.writes_sent} writes{resumed}) "
        f"on {settings.cluster.name} in {result.seconds:.1f} s"
    )
    if result.throttled:
        pace = f", requests to {result.lowest_rate:.1f}/s" if result.lowest_rate else ""
        click.echo(f"the cluster rate-limited {result.throttled} request(s): "
                   f"writes in flight went down to {result.lowest_concurrency}{pace}")  # fmt: skip
    if result.refunded:
        click.echo(f"closed a buffer of an earlier, different ELF: refunded {sol(result.refunded)}")
    click.echo(
        f"program id {result.program_id} (saved in {saved} [programs.{settings.cluster.name}])"
    )
    return out


def _print_cost(settings: Settings, name: str, cost, payer) -> None:
    program = (f"{cost.program_id} ({'upgrade' if cost.upgrade else 'new'})"
               if cost.program_id else "a new program (its keypair is created when deploying)")  # fmt: skip
    resumed = (
        f", {cost.writes_done} of {cost.writes} already in a buffer" if cost.writes_done else ""
    )
    lines = [
        f"dry run, nothing sent: deploying {name} ({cost.elf_size} bytes) to "
        f"{settings.cluster.name} ({settings.cluster.url})",
        f"  program           {program}",
        f"  transactions      {cost.transactions} ({cost.writes - cost.writes_done} writes{resumed})",
        f"  buffer rent       {sol(cost.buffer_rent)} (held while writing, back when the deploy completes)",
        f"  program data rent {sol(cost.programdata_rent)} (room for twice the ELF, so it can grow)",
        f"  program rent      {sol(cost.program_rent)}",
        f"  fees              {sol(cost.fees)} (5000 lamports a signature)",
    ]
    if cost.stale_buffer_refund:
        lines.append(
            f"  refund            {sol(cost.stale_buffer_refund)} (a buffer of an earlier ELF, closed first)"
        )
    short = cost.needed - cost.balance - cost.stale_buffer_refund
    verdict = "enough" if short <= 0 else f"short by {sol(short)}"
    lines += [
        f"  needs up front    {sol(cost.needed)}; costs {sol(cost.spent)} in the end",
        f"  wallet            {payer.pubkey()} holds {sol(cost.balance)} ({verdict})",
    ]
    click.echo("\n".join(lines))
