"""`cohort idl publish|fetch`: a program's IDL in Anchor's on-chain IDL account (the coordinator's unless
`--program` names another shipped program: each command is about one program's id and one IDL)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from .cli_common import Settings, chain_options, echo_json, json_option, run
from .config import PROGRAM_NAME
from .errors import ConfigError

program_option = click.option(
    "--program", "program", default=PROGRAM_NAME, show_default=True, metavar="NAME",
    help="The program whose IDL this is (--program-id is then that program's id).",
)  # fmt: skip


@click.group(name="idl")
def idl_group() -> None:
    """Publish or fetch a program's IDL on chain (Anchor's IDL account); the coordinator's by default."""


@idl_group.command("publish")
@chain_options
@program_option
@click.option("--idl", "idl_path", type=click.Path(dir_okay=False, exists=True, path_type=Path),
              help="IDL JSON to publish. Default: the program's own (packaged) IDL.")  # fmt: skip
@json_option
def publish(settings: Settings, program: str, idl_path: Path | None, as_json: bool) -> None:
    """Put the IDL on chain; the wallet must be the program's upgrade authority."""
    from . import artifacts, idl_account

    path = idl_path or artifacts.idl_path(artifacts.describe(program).name)
    try:
        idl = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"cannot read the IDL {path}: {e}") from None
    program_id, wallet = settings.program_id(program), settings.keypair()

    async def body():
        async with settings.rpc(program) as rpc:
            return await idl_account.publish(rpc, wallet, program_id, idl)

    done = run(body())
    if as_json:
        echo_json({"program_id": program_id, "address": done.address, "unchanged": done.unchanged,
                   "replaced": done.replaced, "compressed_bytes": done.compressed_bytes, "writes": done.writes})  # fmt: skip
    elif done.unchanged:
        click.echo(f"the IDL at {done.address} is already this one ({done.compressed_bytes} bytes)")
    else:
        replaced = " (replacing the previous one)" if done.replaced else ""
        click.echo(f"published the IDL of {program_id} at {done.address}: {done.compressed_bytes} "
                   f"compressed bytes in {done.writes} writes{replaced}")  # fmt: skip


@idl_group.command("fetch")
@chain_options
@program_option
@click.option(
    "--out", type=click.Path(dir_okay=False, path_type=Path), help="Write it here, not to stdout."
)
def fetch(settings: Settings, program: str, out: Path | None) -> None:
    """Print the IDL stored on chain for the program."""
    from . import idl_account

    program_id = settings.program_id(program)

    async def body():
        async with settings.rpc(program) as rpc:
            return await idl_account.fetch(rpc, program_id)

    found = run(body())
    if found is None:
        hint = "" if program == PROGRAM_NAME else f" --program {program}"
        raise ConfigError(f"no IDL is published for {program_id} (run `cohort idl publish{hint}`)")
    text = json.dumps(found.idl(), indent=2)
    if out is None:
        click.echo(text)
    else:
        out.write_text(text + "\n")
        click.echo(f"wrote the IDL of {program_id} (authority {found.authority}) to {out}")
