"""`cohort wallet`: keypair files like solana-keygen's, balances and airdrops."""

from __future__ import annotations

import math

import click
from solders.pubkey import Pubkey

from .cli_common import Settings, chain_options, one_line_errors, run
from .config import load_workspace, resolve_wallet
from .errors import ConfigError
from .wallet import LAMPORTS_PER_SOL, load_keypair, save_keypair, sol


@click.group()
def wallet() -> None:
    """Wallets: solana-keygen keypair files (default ~/.config/solana/id.json)."""


@wallet.command()
@click.option("--wallet", "-k", "path", envvar="COHORT_WALLET", show_envvar=True,
              help="Where to write the keypair. Default: [provider] wallet, else ~/.config/solana/id.json.")  # fmt: skip
@click.option("--force", is_flag=True, help="Overwrite an existing keypair file.")
def new(path: str | None, force: bool) -> None:
    """Create a new keypair file and print its address."""
    from solders.keypair import Keypair

    with one_line_errors():
        target = resolve_wallet(load_workspace(), path)
        keypair = Keypair()
        save_keypair(keypair, target, overwrite=force)
    click.echo(f"wrote {target}")
    click.echo(str(keypair.pubkey()))


@wallet.command()
@click.option("--wallet", "-k", "path", envvar="COHORT_WALLET", show_envvar=True,
              help="Keypair file. Default: [provider] wallet, else ~/.config/solana/id.json.")  # fmt: skip
def address(path: str | None) -> None:
    """Print the wallet's address."""
    with one_line_errors():
        click.echo(str(load_keypair(resolve_wallet(load_workspace(), path)).pubkey()))


def _target(settings: Settings, address: str | None) -> Pubkey:
    if address is None:
        return settings.keypair().pubkey()
    try:
        return Pubkey.from_string(address)
    except ValueError:
        raise ConfigError(f"{address!r} is not a base58 address") from None


@wallet.command()
@click.argument("address", required=False)
@chain_options
def balance(settings: Settings, address: str | None) -> None:
    """Print the balance of ADDRESS (default: the wallet)."""
    target = _target(settings, address)

    async def main() -> int:
        async with settings.rpc() as rpc:
            return await rpc.balance(target)

    click.echo(sol(run(main())))


@wallet.command()
@click.argument("amount", type=float)
@click.argument("address", required=False)
@chain_options
def airdrop(settings: Settings, amount: float, address: str | None) -> None:
    """Request AMOUNT SOL from the cluster's faucet for ADDRESS (default: the wallet).

    Works on the localnet, devnet and testnet.
    """
    if not math.isfinite(amount) or amount <= 0:
        raise ConfigError(f"the amount must be a positive number of SOL, got {amount}")
    target = _target(settings, address)

    async def main() -> int:
        async with settings.rpc() as rpc:
            await rpc.airdrop(target, int(amount * LAMPORTS_PER_SOL))
            return await rpc.balance(target)

    click.echo(f"{target}: {sol(run(main()))}")
