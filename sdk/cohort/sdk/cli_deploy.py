"""`cohort deploy`: build the coordinator if needed and deploy (or upgrade) it over RPC."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from .cli_common import Settings, chain_options, run
from .config import ANCHORFILE, PROGRAM_NAME, write_program_id
from .errors import ConfigError


@click.command()
@click.option("--program-keypair", type=click.Path(dir_okay=False, path_type=Path),
              help="The program's keypair (its address is the program id); created if missing. "
                   "Default: contracts/target/coordinator-keypair.json.")  # fmt: skip
@click.option("--no-build", is_flag=True, help="Deploy contracts/target/coordinator.so as it is.")
@chain_options
def deploy(settings: Settings, program_keypair: Path | None, no_build: bool) -> None:
    """Deploy the coordinator program to a cluster (localnet by default; --cluster devnet for devnet).

    Writes go out concurrently; an interrupted deploy resumes where it stopped when run again. Deploying
    again upgrades the program in place. The program id is written to Anchorfile.toml under
    [programs.<cluster>].
    """
    from cohort.sbf import build

    from .deploy import deploy_program

    payer = settings.keypair()
    keypair_path = program_keypair or build.TARGET_DIR / f"{PROGRAM_NAME}-keypair.json"
    console = Console(stderr=True)

    def elf() -> bytes:
        if no_build:
            path = build.TARGET_DIR / f"{PROGRAM_NAME}.so"
            if not path.exists():
                raise ConfigError(f"{path} does not exist: build it with `cohort build`")
            return path.read_bytes()
        try:
            (program,) = build.build_all([PROGRAM_NAME], log=lambda _: None)
        except build.BuildError as e:
            raise ConfigError(f"build failed: {e}") from None
        return program.so_path.read_bytes()

    async def main():
        async with settings.rpc() as rpc:
            await rpc.balance(
                payer.pubkey()
            )  # fail fast, before building, when the cluster is unreachable
            program = elf()
            with Progress(
                TextColumn("writing"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                console=console, transient=True, disable=not console.is_terminal,
            ) as bar:  # fmt: skip
                task = bar.add_task("write", total=None)
                return await deploy_program(
                    rpc, payer, program, keypair_path,
                    progress=lambda done, total: bar.update(task, completed=done, total=total),
                )  # fmt: skip

    result = run(main())
    verb = "upgraded" if result.upgraded else "deployed"
    resumed = f", {result.writes_skipped} already written" if result.writes_skipped else ""
    click.echo(
        f"{verb} {PROGRAM_NAME} ({result.elf_size} bytes, {result.writes_sent} writes{resumed}) "
        f"on {settings.cluster.name} in {result.seconds:.1f} s"
    )
    anchorfile = settings.workspace.path or Path.cwd() / ANCHORFILE
    write_program_id(anchorfile, settings.cluster.name, result.program_id)
    click.echo(
        f"program id {result.program_id} (saved in {anchorfile} [programs.{settings.cluster.name}])"
    )
