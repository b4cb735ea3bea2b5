"""`cohort wallet`: keypair files like solana-keygen's (with its BIP39 seed phrases), balances and airdrops."""

from __future__ import annotations

import math
import sys

import click
from solders.pubkey import Pubkey

from .cli_common import Settings, chain_options, echo_json, json_option, one_line_errors, run
from .config import load_workspace, resolve_wallet
from .errors import ConfigError, WalletError
from .wallet import (
    LAMPORTS_PER_SOL,
    WORD_COUNTS,
    keypair_from_seed_phrase,
    load_keypair,
    new_seed_phrase,
    save_keypair,
    sol,
)

_WALLET_HELP = "Default: [provider] wallet, else the Solana CLI config's keypair_path, else ~/.config/solana/id.json."


def _secret(prompt: str, *, confirm: bool = False) -> str:
    """A secret from the terminal (not echoed), or one line of stdin when it is not a terminal (scripts)."""
    if sys.stdin.isatty():
        return click.prompt(prompt, hide_input=True, confirmation_prompt=confirm, default="",
                            show_default=False, err=True)  # fmt: skip
    line = sys.stdin.readline()
    if not line:
        raise WalletError(f"{prompt.lower()}: nothing on stdin")
    return line.rstrip("\r\n")


@click.group()
def wallet() -> None:
    """Wallets: solana-keygen keypair files (default ~/.config/solana/id.json) and their seed phrases."""


@wallet.command()
@click.option("--wallet", "-k", "path", envvar="COHORT_WALLET", show_envvar=True,
              help=f"Where to write the keypair. {_WALLET_HELP}")  # fmt: skip
@click.option("--force", is_flag=True, help="Overwrite an existing keypair file.")
@click.option("--word-count", type=click.Choice([str(n) for n in WORD_COUNTS]), default="12", show_default=True,
              help="Words of the seed phrase.")  # fmt: skip
@click.option("--bip39-passphrase", "ask_passphrase", is_flag=True,
              help="Ask for a BIP39 passphrase to protect the seed phrase with (as solana-keygen does); "
                   "read from stdin when it is not a terminal.")  # fmt: skip
@json_option
def new(
    path: str | None, force: bool, word_count: str, ask_passphrase: bool, as_json: bool
) -> None:
    """Create a new keypair file and print its address and its BIP39 seed phrase (`cohort wallet recover`
    and `solana-keygen recover` rebuild the keypair from it)."""
    with one_line_errors():
        target = resolve_wallet(load_workspace(), path)
        if target.expanduser().exists() and not force:  # before asking for anything
            raise WalletError(f"{target} already exists (pass --force to overwrite it)")
        phrase = new_seed_phrase(int(word_count))
        passphrase = (
            _secret("BIP39 passphrase (empty for none)", confirm=True) if ask_passphrase else ""
        )
        keypair = keypair_from_seed_phrase(phrase, passphrase)
        save_keypair(keypair, target, overwrite=force)
    if as_json:
        echo_json({"path": str(target), "address": str(keypair.pubkey()), "seed_phrase": phrase,
                    "bip39_passphrase": bool(passphrase)})  # fmt: skip
        return
    click.echo(f"wrote {target}")
    click.echo(f"pubkey: {keypair.pubkey()}")
    also = " and your BIP39 passphrase" if passphrase else ""
    click.echo(f"Save this seed phrase{also} to recover the keypair (`cohort wallet recover`):")
    click.echo(phrase)


@wallet.command()
@click.option("--wallet", "-k", "path", envvar="COHORT_WALLET", show_envvar=True,
              help=f"Where to write the keypair. {_WALLET_HELP}")  # fmt: skip
@click.option("--force", is_flag=True, help="Overwrite an existing keypair file.")
@click.option("--bip39-passphrase", "ask_passphrase", is_flag=True,
              help="The seed phrase has a BIP39 passphrase: ask for it (the next line of stdin when it is "
                   "not a terminal).")  # fmt: skip
@json_option
def recover(path: str | None, force: bool, ask_passphrase: bool, as_json: bool) -> None:
    """Rebuild a keypair file from its BIP39 seed phrase (asked for; one line of stdin when it is not a
    terminal), as `solana-keygen recover` does."""
    with one_line_errors():
        target = resolve_wallet(load_workspace(), path)
        if target.expanduser().exists() and not force:
            raise WalletError(f"{target} already exists (pass --force to overwrite it)")
        phrase = _secret("Seed phrase")
        passphrase = _secret("BIP39 passphrase") if ask_passphrase else ""
        keypair = keypair_from_seed_phrase(phrase, passphrase)
        save_keypair(keypair, target, overwrite=force)
    if as_json:
        echo_json({"path": str(target), "address": str(keypair.pubkey())})
        return
    click.echo(f"wrote {target}")
    click.echo(f"pubkey: {keypair.pubkey()}")


@wallet.command()
@click.option("--wallet", "-k", "path", envvar="COHORT_WALLET", show_envvar=True,
              help=f"Keypair file. {_WALLET_HELP}")  # fmt: skip
@json_option
def address(path: str | None, as_json: bool) -> None:
    """Print the wallet's address."""
    with one_line_errors():
        target = resolve_wallet(load_workspace(), path)
        pubkey = load_keypair(target).pubkey()
    if as_json:
        echo_json({"path": str(target), "address": str(pubkey)})
    else:
        click.echo(str(pubkey))


def _target(settings: Settings, address: str | None) -> Pubkey:
    if address is None:
        return settings.keypair().pubkey()
    try:
        return Pubkey.from_string(address)
    except ValueError:
        raise ConfigError(f"{address!r} is not a base58 address") from None


@wallet.command()
@click.argument("address", required=False)
@json_option
@chain_options
def balance(settings: Settings, address: str | None, as_json: bool) -> None:
    """Print the balance of ADDRESS (default: the wallet)."""
    target = _target(settings, address)

    async def main() -> int:
        async with settings.rpc() as rpc:
            return await rpc.balance(target)

    lamports = run(main())
    if as_json:
        echo_json(
            {"address": str(target), "lamports": lamports, "sol": lamports / LAMPORTS_PER_SOL}
        )
    else:
        click.echo(sol(lamports))


@wallet.command()
@click.argument("amount", type=float)
@click.argument("address", required=False)
@json_option
@chain_options
def airdrop(settings: Settings, amount: float, address: str | None, as_json: bool) -> None:
    """Request AMOUNT SOL from the cluster's faucet for ADDRESS (default: the wallet).

    Works on the localnet, devnet and testnet.
    """
    if not math.isfinite(amount) or amount <= 0:
        raise ConfigError(f"the amount must be a positive number of SOL, got {amount}")
    target = _target(settings, address)
    requested = int(amount * LAMPORTS_PER_SOL)

    async def main() -> tuple[str, int]:
        async with settings.rpc() as rpc:
            signature = await rpc.airdrop(target, requested)
            return str(signature), await rpc.balance(target)

    signature, lamports = run(main())
    if as_json:
        echo_json({"address": str(target), "requested_lamports": requested, "signature": signature,
                    "lamports": lamports, "sol": lamports / LAMPORTS_PER_SOL})  # fmt: skip
    else:
        click.echo(f"{target}: {sol(lamports)}")
