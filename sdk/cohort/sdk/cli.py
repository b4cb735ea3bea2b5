"""The `cohort` command line. Subcommands import their heavy modules lazily so `cohort --help` is instant."""

from __future__ import annotations

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="cohort")
def cli() -> None:
    """cohort — train language models together over the internet, coordinated on Solana."""


def main() -> None:
    cli()
