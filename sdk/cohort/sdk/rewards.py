"""A run's rewards as users see them: its treasury's vault (mint, balance, rate), each member's earned /
claimed / staked, and slashes (what `cohort rewards status`, `cohort run status`, the explorer and the demo
show), and the treasurer's errors as plain sentences."""

from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass, field
from typing import Any

from solders.pubkey import Pubkey

from .errors import CohortError, ProgramError
from .idl import IdlError
from .treasurer import Treasurer


class RewardsError(CohortError):
    """A rewards command cannot do what it was asked (the sentence says why and what to do)."""


# the treasurer's errors a user meets, in words that say what to do (the IDL's own text otherwise)
PLAIN_ERRORS = {
    "Unauthorized": "the wallet is not the run's authority: only it may do this",
    "WrongClaimKey": "the wallet is not the claim key this member registered: sign with that key",
    "WrongAccountOwner": "an account is not the treasurer's: the run has no treasury, or the member "
    "registered no claim key (`cohort rewards register-claim-key`)",
    "AlreadyInitialized": "already done: the account exists (a treasury, a claim key or a stake is set once)",
    "NothingToClaim": "nothing to claim: every settled point of this member has been paid",
    "BeyondEntitlement": "the amount is more than this member's settled points entitle it to "
    "(`cohort rewards status` shows what is claimable)",
    "VaultShort": "the vault holds less than the amount: it must be funded first (`cohort rewards fund`)",
    "RateLowered": "the rate per point can only be raised, never lowered",
    "NoChange": "nothing to change: the rate is already that",
    "InvalidRate": "the rate must be at least 1 base unit per point",
    "ZeroAmount": "the amount must be more than 0",
    "WrongMint": "the token account or mint is not of the treasury's mint",
    "UnsupportedMint": "the mint has an extension that could take, tax or freeze the vault's tokens "
    "(transfer fee or hook, permanent delegate, non-transferable, default frozen, pausable)",
    "NotPoints": "the member has no settled points in this run yet",
    "WrongPoints": "the member has no settled points in this run yet",
    "StakesOff": "this run requires no stake (its authority did not set one)",
    "StillInRun": "the wallet is still in the run: leave it (exit_run) before unstaking",
    "WrongStakeState": "the stake is not in the state this needs (staked to unstake, unstaking to withdraw)",
    "StakeLocked": "the unstake delay is not over yet",
    "NotJoinAuthority": "the run does not name the treasury's joiner as its join authority with the "
    "Authorized join policy, so it cannot require stakes",
    "DelayTooShort": "the unstake delay must cover an epoch, its cooldown and a round of the run",
    "RunStillOpen": "the run is still open",
    "ClaimWindowOpen": "claims are still open: the treasury closes after its claim window",
}


def plain_error(error: ProgramError) -> RewardsError:
    """A treasurer error as one sentence a user can act on."""
    return RewardsError(PLAIN_ERRORS.get(error.name, error.msg[:1].lower() + error.msg[1:]))


def format_amount(base_units: int, decimals: int) -> str:
    """Base units as the mint's tokens (1500000 at 6 decimals: 1.5)."""
    if decimals == 0:
        return str(base_units)
    whole, part = divmod(base_units, 10**decimals)
    return f"{whole}.{part:0{decimals}d}".rstrip("0").rstrip(".")


def parse_amount(text: str, what: str = "AMOUNT") -> int:
    """A positive whole number of base units, or a RewardsError that says what is wrong."""
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        raise RewardsError(f"{what} {text!r} is not a whole number of base units") from None
    if value <= 0 or value >= 2**64:
        raise RewardsError(f"{what} must be between 1 and {2**64 - 1} base units, not {value}")
    return value


def parse_address(text: str, what: str) -> Pubkey:
    try:
        return Pubkey.from_string(text)
    except ValueError:
        raise RewardsError(f"{what} {text!r} is not a base58 address") from None


@dataclass(frozen=True)
class MemberRewards:
    """One wallet's rewards: points settled into its Points account (paid), points still in the run's
    registry (not payable until settled), what they entitle it to, what it was paid, and its stake."""

    wallet: str
    settled_points: int
    unsettled_points: int
    earned: int  # settled_points × reward_per_point
    claimed: int
    claimable: int
    claim_key: str | None
    staked: int
    stake_state: str | None  # Staked, Unstaking, Slashed; None: no stake


@dataclass(frozen=True)
class RewardsStatus:
    treasury: str
    mint: str
    token_program: str
    decimals: int
    vault: str
    vault_balance: int
    reward_per_point: int
    funded: int
    claimed: int
    slashed: int
    stake_amount: int  # 0: the run requires no stake
    unstake_delay: int
    claim_window: int
    closed_at: int
    members: list[MemberRewards] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> RewardsStatus:
        fields = {k: v for k, v in value.items() if k != "members"}
        return cls(**fields, members=[MemberRewards(**m) for m in value["members"]])

    @property
    def owed(self) -> int:
        """What every member could claim now, together (more than the vault holds: claims wait)."""
        return sum(m.claimable for m in self.members)

    def amount(self, base_units: int) -> str:
        return format_amount(base_units, self.decimals)


def _decode(decode: Any, data: bytes | None) -> dict[str, Any] | None:
    if not data:
        return None
    with contextlib.suppress(IdlError, ValueError):
        return decode(data)
    return None


async def rewards_status(
    rpc: Any, treasurer: Treasurer, run: Pubkey, points: dict[Pubkey, tuple[int, int]]
) -> RewardsStatus | None:
    """The run's treasury and its members (None when the run has no treasury). `points` maps each wallet
    the run knows to (settled, unsettled) points (RunClient.points); stakers are added from their Stake
    accounts."""
    found = await rpc.account_owner_and_data(treasurer.treasury_address(run))
    if found is None or found[0] != treasurer.program_id:
        return None
    treasury = treasurer.decode_treasury(found[1])
    try:
        treasurer.check_treasury(treasury)
    except ValueError as e:  # bound to another coordinator: its points are not this run's
        raise RewardsError(f"the treasury of run {run} is not this coordinator's: {e}") from None
    treasury_address = treasurer.treasury_address(run)
    wallets = dict(points)
    stakes: dict[Pubkey, dict[str, Any]] = {}
    if treasury["stake_amount"]:
        accounts = await rpc.program_accounts(
            treasurer.program_id, discriminator=treasurer.idl.accounts["Stake"]
        )
        for _, data in accounts:
            stake = _decode(treasurer.decode_stake, data)
            if stake is not None and stake["treasury"] == treasury_address:
                stakes[stake["wallet"]] = stake
                wallets.setdefault(stake["wallet"], (0, 0))
    order = list(wallets)
    members = await rpc.multiple_accounts([treasurer.member_address(run, w) for w in order])
    vault = await rpc.account_data(treasury["vault"])
    rate = treasury["reward_per_point"]
    rows = []
    for wallet, found_member in zip(order, members, strict=True):
        member = None
        if found_member is not None and found_member[0] == treasurer.program_id:
            member = _decode(treasurer.decode_member, found_member[1])
        settled, unsettled = wallets[wallet]
        owed = treasurer.entitlement(treasury, member, settled)
        stake = stakes.get(wallet)
        state = None if stake is None else str(stake["state"])
        rows.append(MemberRewards(
            str(wallet), settled, unsettled, owed.earned, owed.claimed, owed.claimable,
            str(member["claim_key"]) if member else None,
            stake["amount"] if stake and state != "Slashed" else 0, state,
        ))  # fmt: skip
    rows.sort(key=lambda m: (-m.earned, m.wallet))
    return RewardsStatus(
        treasury=str(treasury_address), mint=str(treasury["mint"]),
        token_program=str(treasury["token_program"]), decimals=treasury["decimals"],
        vault=str(treasury["vault"]), vault_balance=int.from_bytes(vault[64:72], "little") if vault else 0,
        reward_per_point=rate, funded=treasury["funded"], claimed=treasury["claimed"],
        slashed=treasury["slashed"], stake_amount=treasury["stake_amount"],
        unstake_delay=treasury["unstake_delay"], claim_window=treasury["claim_window"],
        closed_at=treasury["closed_at"], members=rows,
    )  # fmt: skip


def payout_lines(status: RewardsStatus) -> list[str]:
    """What each member can claim, one line each, and the vault: the demo's closing summary."""
    lines = [
        f"vault {status.amount(status.vault_balance)} tokens of mint {status.mint} "
        f"({status.reward_per_point} base units a settled point)"
    ]
    for m in status.members:
        pending = f", {m.unsettled_points} points not settled yet" if m.unsettled_points else ""
        lines.append(
            f"{m.wallet}: {m.settled_points} points → can claim {status.amount(m.claimable)} tokens "
            f"(claimed {status.amount(m.claimed)}){pending}"
        )
    return lines
