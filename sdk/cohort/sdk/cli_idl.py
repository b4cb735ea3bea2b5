"""`cohort idl publish|fetch`: the coordinator's IDL in Anchor's on-chain IDL account."""

from __future__ import annotations

import json
from pathlib import Path

import click

from .cli_common import Settings, chain_options, run
from .errors import ConfigError


@click.group(name="idl")
def idl_group() -> None:
    """Publish or fetch the coordinator's IDL on chain (Anchor's IDL account)."""


@idl_group.command("publish")
@chain_options
@click.option("--idl", "idl_path", type=click.Path(dir_okay=False, exists=True, path_type=Path),
              help="IDL JSON to publish. Default: the coordinator's own (packaged) IDL.")  # fmt: skip
def publish(settings: Settings, idl_path: Path | None) -> None:
    """Put the IDL on chain; the wallet must be the program's upgrade authority."""
    from . import artifacts, idl_account

    path = idl_path or artifacts.idl_path()
    try:
        idl = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"cannot read the IDL {path}: {e}") from None
    program_id, wallet = settings.program_id(), settings.keypair()

    async def body():
        async with settings.rpc() as rpc:
            return await idl_account.publish(rpc, wallet, program_id, idl)

    done = run(body())
    if done.unchanged:
        click.echo(f"the IDL at {done.address} is already this one ({done.compressed_bytes} bytes)")
    else:
        replaced = " (replacing the previous one)" if done.replaced else ""
        click.echo(f"published the IDL of {program_id} at {done.address}: {done.compressed_bytes} "
                   f"compressed bytes in {done.writes} writes{replaced}")  # fmt: skip


@idl_group.command("fetch")
@chain_options
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), help="Write it here, not to stdout.")
def fetch(settings: Settings, out: Path | None) -> None:
    """Print the IDL stored on chain for the program."""
    from . import idl_account

    program_id = settings.program_id()

    async def body():
        async with settings.rpc() as rpc:
            return await idl_account.fetch(rpc, program_id)

    found = run(body())
    if found is None:
        raise ConfigError(f"no IDL is published for {program_id} (run `cohort idl publish`)")
    text = json.dumps(found.idl(), indent=2)
    if out is None:
        click.echo(text)
    else:
        out.write_text(text + "\n")
        click.echo(f"wrote the IDL of {program_id} (authority {found.authority}) to {out}")
