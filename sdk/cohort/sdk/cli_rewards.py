"""`cohort rewards`: a run's SPL-token rewards and stakes through the treasurer program — create the treasury,
fund it, raise its rate, register a claim key, claim, stake and unstake, and show who is owed what."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.table import Table
from solders.instruction import Instruction
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from .cli_common import Settings, chain_options, echo_json, json_option, run
from .errors import ProgramError
from .rewards import RewardsError, RewardsStatus, parse_address, parse_amount, plain_error

T = TypeVar("T")
DEFAULT_CLAIM_WINDOW = (
    30 * 86_400
)  # what stays claimable after a run closes, unless the authority says


@dataclass
class Rewards:
    """One command's open connection: the coordinator's RunClient and the treasurer's client."""

    settings: Settings
    client: Any  # RunClient
    treasurer: Any  # TreasurerClient

    @property
    def rpc(self) -> Any:
        return self.client.rpc

    async def run(self, run_ref: str) -> Pubkey:
        """The run's address; RunNotFound (one line) when the coordinator has no such run."""
        return (await self.client.fetch_run(run_ref)).address

    async def treasury(self, run_ref: str) -> tuple[Pubkey, dict[str, Any]]:
        address = await self.run(run_ref)
        try:
            treasury = await self.treasurer.treasury(address)
        except ValueError as e:  # Treasurer.check_treasury: bound to another coordinator
            raise RewardsError(
                f"the treasury of run {run_ref} is not this coordinator's: {e}"
            ) from None
        if treasury is None:
            raise RewardsError(f"run {run_ref} has no treasury: its authority creates one with "
                               "`cohort rewards init`")  # fmt: skip
        return address, treasury

    async def send(self, instructions: list[Instruction], payer: Keypair,
                   signers: tuple[Keypair, ...] = ()) -> str:  # fmt: skip
        try:
            return str(await self.treasurer.send(instructions, payer, signers))
        except ProgramError as e:
            if self.treasurer.treasurer.failure(e.logs) is None:
                raise  # another program's error (the coordinator's, named from its IDL)
            raise plain_error(e) from None

    async def status(self, run_ref: str) -> RewardsStatus | None:
        from .rewards import rewards_status

        points = {p.wallet: (p.claimed, p.unclaimed) for p in await self.client.points(run_ref)}
        return await rewards_status(
            self.rpc, self.treasurer.treasurer, await self.run(run_ref), points
        )


async def _with_rewards(settings: Settings, treasurer_id: str | None, body: Callable[[Rewards], Awaitable[T]]) -> T:  # fmt: skip
    """Open the RPC, check the coordinator and the treasurer are deployed there, and run `body`."""
    from .config import resolve_program_id
    from .program_check import check_coordinator, probe_rpc
    from .treasurer import PROGRAM_NAME, Treasurer, TreasurerClient

    async with settings.rpc() as rpc:
        await probe_rpc(rpc)
        settings.reachable = True
        coordinator = settings.program_id()
        await check_coordinator(rpc, coordinator, settings.cluster, rpc.idl)
        program = resolve_program_id(
            settings.workspace, settings.cluster, treasurer_id, PROGRAM_NAME
        )
        found = await rpc.account_owner_and_data(program)
        if found is None:
            raise RewardsError(f"no treasurer program at {program} on {settings.cluster.name}: run "
                               f"`cohort deploy --program treasurer --cluster {settings.cluster.name}`")  # fmt: skip
        client = settings.run_client(rpc)
        return await body(
            Rewards(settings, client, TreasurerClient(rpc, Treasurer(program, coordinator)))
        )


def treasurer_option(command: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--treasurer-id", envvar="COHORT_TREASURER_ID", show_envvar=True,
                        help="Treasurer program id. Default: [programs.<cluster>] treasurer (what "
                             "`cohort deploy --program treasurer` recorded).")(command)  # fmt: skip


@click.group(name="rewards")
def rewards_group() -> None:
    """A run's rewards in an SPL token: the treasury, its funding, members' claims and stakes (RUN is a run
    id or its account address; amounts are in the mint's base units)."""


def _status_json(status: RewardsStatus | None, run_ref: str) -> dict[str, Any]:
    return (
        {"run": run_ref, "treasury": None}
        if status is None
        else {"run": run_ref, **status.to_json()}
    )


def render_status(status: RewardsStatus, console: Console) -> None:
    """The vault and the members' table (also under `cohort run status`)."""
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    head.add_row("reward vault", f"{status.amount(status.vault_balance)} of mint {status.mint}")
    head.add_row("rate", f"{status.reward_per_point} base units a settled point")
    head.add_row(
        "funded / claimed", f"{status.amount(status.funded)} / {status.amount(status.claimed)}"
    )
    if status.stake_amount:
        head.add_row("stake to join", status.amount(status.stake_amount))
    if status.slashed:
        head.add_row("slashed", f"{status.amount(status.slashed)} (went to the reward vault)")
    console.print(head)
    if status.members:
        table = Table("wallet", "settled points", "earned", "claimed", "claimable", "staked")
        for m in status.members:
            stake = "" if m.stake_state is None else f"{status.amount(m.staked)} {m.stake_state}"
            table.add_row(m.wallet, str(m.settled_points) + (f" (+{m.unsettled_points})" if m.unsettled_points else ""),
                          status.amount(m.earned), status.amount(m.claimed), status.amount(m.claimable), stake)  # fmt: skip
        console.print(table)


@rewards_group.command()
@click.argument("run_ref", metavar="RUN")
@click.option("--member", help="Only this wallet's row.")
@treasurer_option
@json_option
@chain_options
def status(settings: Settings, run_ref: str, member: str | None, treasurer_id: str | None, as_json: bool) -> None:  # fmt: skip
    """Show RUN's reward vault (mint, balance, rate) and each member's earned / claimed / claimable / staked."""
    wallet = str(parse_address(member, "--member")) if member else None

    async def body(r: Rewards) -> RewardsStatus | None:
        return await r.status(run_ref)

    found = run(_with_rewards(settings, treasurer_id, body))
    if found is not None and wallet is not None:
        found.members[:] = [m for m in found.members if m.wallet == wallet]
    if as_json:
        echo_json(_status_json(found, run_ref))
    elif found is None:
        click.echo(f"run {run_ref} has no treasury (no rewards)")
    else:
        render_status(found, Console())


@rewards_group.command()
@click.argument("run_ref", metavar="RUN")
@click.option(
    "--rate", required=True, help="Base units paid per settled point (it can only be raised later)."
)
@click.option("--mint", help="The reward token's mint (SPL Token or Token-2022).")
@click.option("--new-mint", is_flag=True, help="Create a fresh mint with the wallet as its mint authority "
              "(for a localnet or devnet trial).")  # fmt: skip
@click.option(
    "--decimals", type=click.IntRange(0, 9), default=6, show_default=True, help="Of a --new-mint."
)
@click.option(
    "--supply", help="With --new-mint: base units minted to a new token account of the wallet."
)
@click.option("--claim-window", type=click.IntRange(min=0), default=DEFAULT_CLAIM_WINDOW, show_default=True,
              help="Seconds rewards stay claimable after the run closes (then the authority may take the rest).")  # fmt: skip
@treasurer_option
@json_option
@chain_options
def init(settings: Settings, run_ref: str, rate: str, mint: str | None, new_mint: bool, decimals: int,
         supply: str | None, claim_window: int, treasurer_id: str | None, as_json: bool) -> None:  # fmt: skip
    """Create RUN's treasury: its vault of a mint and the rate per point (signed by the run's authority)."""
    from . import spl_token

    reward_per_point = parse_amount(rate, "--rate")
    if (mint is None) == (not new_mint):
        raise click.UsageError("give either --mint MINT or --new-mint")
    if supply is not None and not new_mint:
        raise click.UsageError(
            "--supply needs --new-mint (mint the tokens of an existing mint yourself)"
        )
    minted = parse_amount(supply, "--supply") if supply is not None else 0
    mint_address = parse_address(mint, "--mint") if mint else None
    authority = settings.keypair()

    async def body(r: Rewards) -> dict[str, Any]:
        address = await r.run(run_ref)
        if await r.rpc.account_data(r.treasurer.treasurer.treasury_address(address)):
            raise RewardsError(
                f"run {run_ref} already has a treasury (`cohort rewards status {run_ref}`)"
            )
        address_of_mint = mint_address or await spl_token.create_mint(
            r.rpc, authority, authority.pubkey(), decimals
        )
        token_mint = await spl_token.read_mint(r.rpc, address_of_mint)
        t = r.treasurer.treasurer
        await r.send([t.init_treasury(authority.pubkey(), authority.pubkey(), address, token_mint.address,
                                      token_mint.token_program, reward_per_point, claim_window)], authority)  # fmt: skip
        source = None
        if minted:
            source = await spl_token.create_token_account(
                r.rpc, authority, token_mint, authority.pubkey()
            )
            await spl_token.mint_to(r.rpc, authority, token_mint, authority, source, minted)
        return {"run": run_ref, "treasury": str(t.treasury_address(address)), "vault": str(t.vault_address(address)),
                "mint": str(token_mint.address), "token_program": str(token_mint.token_program),
                "decimals": token_mint.decimals, "reward_per_point": reward_per_point, "claim_window": claim_window,
                "minted_to": str(source) if source else None, "minted": minted}  # fmt: skip

    out = run(_with_rewards(settings, treasurer_id, body))
    if as_json:
        echo_json(out)
        return
    click.echo(f"created the treasury of run {run_ref}: vault {out['vault']} of mint {out['mint']}, "
               f"{reward_per_point} base units a settled point")  # fmt: skip
    if out["minted_to"]:
        click.echo(
            f"minted {minted} base units to {out['minted_to']} (fund with `--from {out['minted_to']}`)"
        )


@rewards_group.command()
@click.argument("run_ref", metavar="RUN")
@click.argument("amount")
@click.option(
    "--from", "source", required=True, help="The wallet's token account of the treasury's mint."
)
@treasurer_option
@json_option
@chain_options
def fund(settings: Settings, run_ref: str, amount: str, source: str, treasurer_id: str | None, as_json: bool) -> None:  # fmt: skip
    """Move AMOUNT base units into RUN's reward vault (anyone may fund a run)."""
    from . import spl_token

    units = parse_amount(amount)
    source_address = parse_address(source, "--from")
    funder = settings.keypair()

    async def body(r: Rewards) -> dict[str, Any]:
        address, treasury = await r.treasury(run_ref)
        account = await spl_token.read_token_account(r.rpc, source_address)
        if account.mint != treasury["mint"]:
            raise RewardsError(f"--from {source_address} holds mint {account.mint}, not the treasury's "
                               f"{treasury['mint']}")  # fmt: skip
        if account.owner != funder.pubkey():
            raise RewardsError(f"--from {source_address} belongs to {account.owner}, not to the wallet "
                               f"{funder.pubkey()}")  # fmt: skip
        if account.amount < units:
            raise RewardsError(
                f"--from {source_address} holds {account.amount} base units, less than {units}"
            )
        t = r.treasurer.treasurer
        signature = await r.send(
            [t.fund(address, treasury, funder.pubkey(), source_address, units)], funder
        )
        return {"run": run_ref, "amount": units, "vault": str(treasury["vault"]),
                "vault_balance": await spl_token.balance(r.rpc, treasury["vault"]), "signature": signature}  # fmt: skip

    out = run(_with_rewards(settings, treasurer_id, body))
    if as_json:
        echo_json(out)
    else:
        click.echo(
            f"funded run {run_ref} with {units} base units: the vault holds {out['vault_balance']}"
        )


@rewards_group.command(name="set-rate")
@click.argument("run_ref", metavar="RUN")
@click.argument("rate")
@treasurer_option
@json_option
@chain_options
def set_rate(
    settings: Settings, run_ref: str, rate: str, treasurer_id: str | None, as_json: bool
) -> None:
    """Raise RUN's rate to RATE base units a settled point (the run's authority; never lowered)."""
    units = parse_amount(rate, "RATE")
    authority = settings.keypair()

    async def body(r: Rewards) -> dict[str, Any]:
        address, _ = await r.treasury(run_ref)
        await r.send(
            [r.treasurer.treasurer.set_rate(address, authority.pubkey(), units)], authority
        )
        return {"run": run_ref, "reward_per_point": units}

    out = run(_with_rewards(settings, treasurer_id, body))
    if as_json:
        echo_json(out)
    else:
        click.echo(f"run {run_ref} now pays {units} base units a settled point")


@rewards_group.command(name="register-claim-key")
@click.argument("run_ref", metavar="RUN")
@click.argument("claim_key", required=False)
@treasurer_option
@json_option
@chain_options
def register_claim_key(settings: Settings, run_ref: str, claim_key: str | None, treasurer_id: str | None,
                       as_json: bool) -> None:  # fmt: skip
    """Name the key that claims the wallet's rewards in RUN (default: the wallet itself). Once: it can never
    be replaced, so a stolen node wallet cannot redirect them."""
    wallet = settings.keypair()
    key = parse_address(claim_key, "CLAIM_KEY") if claim_key else wallet.pubkey()

    async def body(r: Rewards) -> dict[str, Any]:
        address, _ = await r.treasury(run_ref)
        t = r.treasurer.treasurer
        existing = await r.rpc.account_data(t.member_address(address, wallet.pubkey()))
        if existing:
            registered = t.decode_member(existing)["claim_key"]
            raise RewardsError(f"{wallet.pubkey()} already registered claim key {registered} in run {run_ref} "
                               "(it can never be replaced)")  # fmt: skip
        await r.send([t.register_claim_key(address, wallet.pubkey(), key)], wallet)
        return {"run": run_ref, "wallet": str(wallet.pubkey()), "claim_key": str(key)}

    out = run(_with_rewards(settings, treasurer_id, body))
    if as_json:
        echo_json(out)
    else:
        click.echo(f"{out['claim_key']} claims the rewards of {out['wallet']} in run {run_ref}")


@rewards_group.command()
@click.argument("run_ref", metavar="RUN")
@click.option("--member", help="The wallet whose rewards to claim (default: the signing wallet).")
@click.option("--amount", help="Base units (default: everything claimable now).")
@click.option(
    "--to",
    "destination",
    help="A token account of the mint (default: a new one owned by the member).",
)
@treasurer_option
@json_option
@chain_options
def claim(settings: Settings, run_ref: str, member: str | None, amount: str | None, destination: str | None,
          treasurer_id: str | None, as_json: bool) -> None:  # fmt: skip
    """Claim what a member's settled points in RUN entitle it to, signed by its claim key (the wallet)."""
    from . import spl_token

    claim_key = settings.keypair()
    wallet = parse_address(member, "--member") if member else claim_key.pubkey()
    units = parse_amount(amount, "--amount") if amount is not None else None
    to = parse_address(destination, "--to") if destination else None

    async def body(r: Rewards) -> dict[str, Any]:
        address, treasury = await r.treasury(run_ref)
        t = r.treasurer.treasurer
        member_data = await r.rpc.account_data(t.member_address(address, wallet))
        if not member_data:
            raise RewardsError(f"{wallet} registered no claim key in run {run_ref}: "
                               "`cohort rewards register-claim-key` (signed by that wallet) first")  # fmt: skip
        registered = t.decode_member(member_data)["claim_key"]
        if registered != claim_key.pubkey():
            raise RewardsError(
                f"the wallet {claim_key.pubkey()} is not the claim key of {wallet} ({registered})"
            )
        owed = await r.treasurer.entitlement(address, wallet)
        if owed.claimable == 0:
            raise RewardsError(f"nothing to claim for {wallet} in run {run_ref}: {owed.points} settled points, "
                               f"{owed.claimed} base units already claimed")  # fmt: skip
        paid = owed.claimable if units is None else units
        if paid > owed.claimable:
            raise RewardsError(
                f"{paid} base units is more than {wallet} can claim ({owed.claimable})"
            )
        mint = await spl_token.read_mint(r.rpc, treasury["mint"])
        if to is None:
            target = await spl_token.create_token_account(r.rpc, claim_key, mint, wallet)
        else:
            target = to
            account = await spl_token.read_token_account(r.rpc, to)
            if account.mint != treasury["mint"]:
                raise RewardsError(
                    f"--to {to} holds mint {account.mint}, not the treasury's {treasury['mint']}"
                )
        signature = await r.send(
            [t.claim(address, treasury, wallet, claim_key.pubkey(), target, paid)], claim_key
        )
        return {"run": run_ref, "wallet": str(wallet), "amount": paid, "to": str(target),
                "claimed": owed.claimed + paid, "claimable": owed.claimable - paid, "signature": signature}  # fmt: skip

    out = run(_with_rewards(settings, treasurer_id, body))
    if as_json:
        echo_json(out)
    else:
        click.echo(f"claimed {out['amount']} base units for {out['wallet']} to {out['to']} "
                   f"({out['claimable']} left to claim)")  # fmt: skip


@rewards_group.command(name="init-stakes")
@click.argument("run_ref", metavar="RUN")
@click.option("--amount", required=True, help="Base units a wallet stakes to join.")
@click.option("--unstake-delay", type=click.IntRange(min=0), required=True,
              help="Seconds between leaving and withdrawing (at least an epoch, its cooldown and a round).")  # fmt: skip
@treasurer_option
@json_option
@chain_options
def init_stakes(settings: Settings, run_ref: str, amount: str, unstake_delay: int, treasurer_id: str | None,
                as_json: bool) -> None:  # fmt: skip
    """Require a stake to join RUN (the run's authority; the run must name the treasury's joiner as its
    join authority, with the Authorized join policy)."""
    units = parse_amount(amount, "--amount")
    authority = settings.keypair()

    async def body(r: Rewards) -> dict[str, Any]:
        address, treasury = await r.treasury(run_ref)
        t = r.treasurer.treasurer
        await r.send([t.init_stakes(authority.pubkey(), authority.pubkey(), address, treasury, units, unstake_delay)],
                     authority)  # fmt: skip
        return {"run": run_ref, "stake_amount": units, "unstake_delay": unstake_delay,
                "joiner": str(t.joiner_address(address))}  # fmt: skip

    out = run(_with_rewards(settings, treasurer_id, body))
    if as_json:
        echo_json(out)
    else:
        click.echo(f"run {run_ref} requires a stake of {units} base units to join")


@rewards_group.command()
@click.argument("run_ref", metavar="RUN")
@click.option(
    "--from", "source", required=True, help="The wallet's token account of the treasury's mint."
)
@treasurer_option
@json_option
@chain_options
def stake(
    settings: Settings, run_ref: str, source: str, treasurer_id: str | None, as_json: bool
) -> None:
    """Stake the amount RUN requires, which lets the wallet join it (a conviction forfeits it)."""
    from . import spl_token

    source_address = parse_address(source, "--from")
    wallet = settings.keypair()

    async def body(r: Rewards) -> dict[str, Any]:
        address, treasury = await r.treasury(run_ref)
        if not treasury["stake_amount"]:
            raise RewardsError(f"run {run_ref} requires no stake")
        account = await spl_token.read_token_account(r.rpc, source_address)
        if account.mint != treasury["mint"] or account.amount < treasury["stake_amount"]:
            raise RewardsError(f"--from {source_address} must hold {treasury['stake_amount']} base units of mint "
                               f"{treasury['mint']}")  # fmt: skip
        t = r.treasurer.treasurer
        await r.send([t.stake(address, treasury, wallet.pubkey(), source_address)], wallet)
        return {"run": run_ref, "wallet": str(wallet.pubkey()), "staked": treasury["stake_amount"]}

    out = run(_with_rewards(settings, treasurer_id, body))
    if as_json:
        echo_json(out)
    else:
        click.echo(f"staked {out['staked']} base units: {out['wallet']} may join run {run_ref}")


@rewards_group.command()
@click.argument("run_ref", metavar="RUN")
@click.option(
    "--to", "destination", help="With --withdraw: a token account of the mint (default: a new one)."
)
@click.option("--withdraw", is_flag=True, help="Withdraw a stake whose unstake delay is over.")
@treasurer_option
@json_option
@chain_options
def unstake(settings: Settings, run_ref: str, destination: str | None, withdraw: bool, treasurer_id: str | None,
            as_json: bool) -> None:  # fmt: skip
    """Start the unstake delay of the wallet's stake in RUN (after leaving it), or --withdraw it once over."""
    from . import spl_token

    wallet = settings.keypair()
    to = parse_address(destination, "--to") if destination else None

    async def body(r: Rewards) -> dict[str, Any]:
        address, treasury = await r.treasury(run_ref)
        t = r.treasurer.treasurer
        data = await r.rpc.account_data(t.stake_address(address, wallet.pubkey()))
        if not data:
            raise RewardsError(f"{wallet.pubkey()} has no stake in run {run_ref}")
        held = t.decode_stake(data)
        if not withdraw:
            await r.send([t.unstake(address, wallet.pubkey())], wallet)
            after = t.decode_stake(
                await r.rpc.account_data(t.stake_address(address, wallet.pubkey()))
            )
            return {"run": run_ref, "wallet": str(wallet.pubkey()), "state": str(after["state"]),
                    "unstake_at": after["unstake_at"], "amount": after["amount"]}  # fmt: skip
        target = to or await spl_token.create_token_account(
            r.rpc, wallet, await spl_token.read_mint(r.rpc, treasury["mint"]), wallet.pubkey()
        )
        await r.send([t.withdraw_stake(address, treasury, wallet.pubkey(), target)], wallet)
        paid = 0 if str(held["state"]) == "Slashed" else held["amount"]
        return {
            "run": run_ref,
            "wallet": str(wallet.pubkey()),
            "state": "Withdrawn",
            "amount": paid,
            "to": str(target),
        }

    out = run(_with_rewards(settings, treasurer_id, body))
    if as_json:
        echo_json(out)
    elif withdraw:
        click.echo(f"withdrew {out['amount']} base units to {out['to']}")
    else:
        click.echo(f"unstaking: withdraw {out['amount']} base units after unix time {out['unstake_at']} "
                   "(`cohort rewards unstake --withdraw`)")  # fmt: skip
