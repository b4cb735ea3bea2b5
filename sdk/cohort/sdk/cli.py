"""The `cohort` command line. Subcommands import their heavy modules lazily so `cohort --help` is instant."""

from __future__ import annotations

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="cohort")
def cli() -> None:
    """cohort — train language models together over the internet, coordinated on Solana."""


@cli.command("build")
@click.argument("programs", nargs=-1)
@click.option("--force", is_flag=True, help="Rebuild even when up to date.")
def build_command(programs: tuple[str, ...], force: bool) -> None:
    """Build the Solana programs under contracts/ (SBF .so and host library)."""
    from cohort.sbf import build

    try:
        build.build_all(list(programs) or None, force=force, log=click.echo)
    except build.BuildError as e:
        raise click.ClickException(str(e)) from e


@cli.command()
def demo() -> None:
    """Build, deploy and run what exists, on this machine (no network needed)."""
    from . import demo as demo_module

    demo_module.run()


def _register_localnet() -> None:
    # the localnet's command group lives with the localnet; registered here so `cohort localnet ...` works
    from cohort.localnet.cli import localnet

    cli.add_command(localnet)


def main() -> None:
    _register_localnet()
    cli()
