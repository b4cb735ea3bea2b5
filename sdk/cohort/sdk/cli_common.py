"""What the chain-facing commands share: the cluster/wallet/program options, the SDK session they open, and
turning every SDK error into one line and a non-zero exit."""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import click
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from .config import (
    PROGRAM_NAME,
    Cluster,
    Workspace,
    load_workspace,
    resolve_cluster,
    resolve_program_id,
    resolve_wallet,
)
from .errors import CohortError, ConfigError
from .wallet import load_keypair

T = TypeVar("T")


@dataclass
class Settings:
    """The resolved options of one command."""

    workspace: Workspace
    cluster: Cluster
    wallet_path: Path
    program_id_flag: str | None
    reachable: bool = field(default=False)  # the RPC answered a probe (program_check.probe_rpc)

    def keypair(self) -> Keypair:
        return load_keypair(self.wallet_path)

    def program_id(self, program: str = PROGRAM_NAME) -> Pubkey:
        """The coordinator's id on this cluster (or the named program's: --program-id is the id of the program
        the command is about). When none is configured, an RPC that does not answer is the error to report
        first: a mistyped --cluster URL names a cluster nobody deployed to, too."""
        try:
            return resolve_program_id(self.workspace, self.cluster, self.program_id_flag, program)
        except ConfigError:
            if not self.reachable:
                from .program_check import probe_now

                probe_now(self.cluster.urls)  # RpcUnavailable/RpcRefused when the URL is wrong
                self.reachable = True
            raise

    def rpc(self, program: str = PROGRAM_NAME):
        """An RPC session that names failures by `program`'s errors (the coordinator's by default)."""
        from . import artifacts
        from .idl import Idl
        from .rpc import Rpc

        return Rpc(self.cluster.urls, idl=Idl.load(artifacts.idl_path(program)))

    def run_client(self, rpc: Any):
        from .client import RunClient

        return RunClient(rpc, self.program_id(), ws_url=self.cluster.ws_url, idl=rpc.idl)


def chain_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add --cluster/--wallet/--program-id/--anchorfile/--ws-url; the command gets `settings`."""

    @click.option("--cluster", "-u", "cluster", envvar="COHORT_CLUSTER", show_envvar=True,
                  help="localnet, devnet, testnet, mainnet-beta (or the Solana CLI's l, d, t, m), a name from "
                       "Anchorfile [clusters], or RPC URL(s), comma-separated for fallbacks. Default: [provider] "
                       "cluster, else the Solana CLI config's json_rpc_url, else localnet.")  # fmt: skip
    @click.option("--wallet", "-k", "wallet", envvar="COHORT_WALLET", show_envvar=True,
                  help="Keypair file (solana-keygen JSON). Default: [provider] wallet, else the Solana CLI "
                       "config's keypair_path, else ~/.config/solana/id.json.")  # fmt: skip
    @click.option("--program-id", envvar="COHORT_PROGRAM_ID", show_envvar=True,
                  help="Coordinator program id. Default: [programs.<cluster>] coordinator.")  # fmt: skip
    @click.option("--anchorfile", envvar="COHORT_ANCHORFILE", show_envvar=True,
                  type=click.Path(dir_okay=False, path_type=Path),
                  help="Workspace file. Default: the nearest Anchorfile.toml.")  # fmt: skip
    @click.option("--ws-url", envvar="COHORT_WS_URL", show_envvar=True,
                  help="Websocket URL. Default: derived from the RPC URL (ws, port + 1).")  # fmt: skip
    @functools.wraps(command)
    def wrapper(cluster, wallet, program_id, anchorfile, ws_url, **kwargs):
        def settings() -> Settings:
            workspace = load_workspace(anchorfile)
            return Settings(
                workspace,
                resolve_cluster(workspace, cluster, ws_url),
                resolve_wallet(workspace, wallet),
                program_id,
            )

        with one_line_errors():
            return command(settings=settings(), **kwargs)

    return wrapper


class one_line_errors:
    """Context manager: an SDK error becomes `Error: <its message>` and exit status 1."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, exc, tb) -> bool:
        if isinstance(exc, CohortError):
            raise click.ClickException(str(exc)) from None
        return False


json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON (for scripts).")


def echo_json(value: Any) -> None:
    """A command's result as JSON on stdout (addresses and paths as strings)."""
    click.echo(json.dumps(value, indent=2, default=str))


def run(coroutine: Awaitable[T]) -> T:
    """Run one command's async body (errors are reported by the command's one_line_errors)."""
    return asyncio.run(coroutine)  # type: ignore[arg-type]
