"""The treasurer program from Python: its addresses, its accounts decoded, each instruction built from the
generated typed instruction types (`cohort.sdk.abi.treasurer`), and a small RPC client.

A run's treasury (PDA ["treasury", run]) escrows one SPL Token or Token-2022 mint in its vault (PDA
["vault", treasury], a token account the treasury owns). A member is paid `points × reward_per_point`
base units for the points the coordinator settled into its Points account (PDA ["points", run, wallet] of
the coordinator), minus what it was already paid, to any token account, signed by the claim key its wallet
registered once (Member, PDA ["member", treasury, wallet]).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from solders.instruction import Instruction
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.signature import Signature

from cohort.sdk import artifacts
from cohort.sdk.abi import treasurer as ix
from cohort.sdk.errors import ProgramError, TransactionFailed
from cohort.sdk.idl import Idl

PROGRAM_NAME = "treasurer"
TOKEN_PROGRAM_ID = Pubkey.from_string("TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA")
TOKEN_2022_PROGRAM_ID = Pubkey.from_string("TokenzQdBNbLqP5VEhdkAS6EPFLC1PHnBqCXEpPxuEb")


def load_idl() -> Idl:
    return Idl.load(artifacts.idl_path(PROGRAM_NAME))


def treasury_address(program_id: Pubkey, run: Pubkey) -> Pubkey:
    return Pubkey.find_program_address([b"treasury", bytes(run)], program_id)[0]


def vault_address(program_id: Pubkey, treasury: Pubkey) -> Pubkey:
    return Pubkey.find_program_address([b"vault", bytes(treasury)], program_id)[0]


def member_address(program_id: Pubkey, treasury: Pubkey, wallet: Pubkey) -> Pubkey:
    return Pubkey.find_program_address([b"member", bytes(treasury), bytes(wallet)], program_id)[0]


def joiner_address(program_id: Pubkey, treasury: Pubkey) -> Pubkey:
    """The PDA a staking run names as its join authority (initialize_run's join_authority)."""
    return Pubkey.find_program_address([b"joiner", bytes(treasury)], program_id)[0]


def stake_vault_address(program_id: Pubkey, treasury: Pubkey) -> Pubkey:
    return Pubkey.find_program_address([b"stakes", bytes(treasury)], program_id)[0]


def stake_address(program_id: Pubkey, treasury: Pubkey, wallet: Pubkey) -> Pubkey:
    return Pubkey.find_program_address([b"stake", bytes(treasury), bytes(wallet)], program_id)[0]


def points_address(coordinator_id: Pubkey, run: Pubkey, wallet: Pubkey) -> Pubkey:
    """The coordinator's Points account of (run, wallet): where the treasurer reads settled points."""
    return Pubkey.find_program_address([b"points", bytes(run), bytes(wallet)], coordinator_id)[0]


@dataclass(frozen=True)
class Entitlement:
    """What a member may claim now: `points × reward_per_point − claimed` (never below zero)."""

    points: int
    reward_per_point: int
    claimed: int

    @property
    def earned(self) -> int:
        return self.points * self.reward_per_point

    @property
    def claimable(self) -> int:
        return max(0, self.earned - self.claimed)


class Treasurer:
    """Instruction builders for one deployed treasurer, bound to the coordinator whose points it pays."""

    def __init__(self, program_id: Pubkey, coordinator_id: Pubkey, idl: Idl | None = None) -> None:
        self.program_id = program_id
        self.coordinator_id = coordinator_id
        self.idl = idl or load_idl()

    # -- addresses and accounts -------------------------------------------------------------------------
    def treasury_address(self, run: Pubkey) -> Pubkey:
        return treasury_address(self.program_id, run)

    def vault_address(self, run: Pubkey) -> Pubkey:
        return vault_address(self.program_id, self.treasury_address(run))

    def member_address(self, run: Pubkey, wallet: Pubkey) -> Pubkey:
        return member_address(self.program_id, self.treasury_address(run), wallet)

    def points_address(self, run: Pubkey, wallet: Pubkey) -> Pubkey:
        return points_address(self.coordinator_id, run, wallet)

    def joiner_address(self, run: Pubkey) -> Pubkey:
        return joiner_address(self.program_id, self.treasury_address(run))

    def stake_vault_address(self, run: Pubkey) -> Pubkey:
        return stake_vault_address(self.program_id, self.treasury_address(run))

    def stake_address(self, run: Pubkey, wallet: Pubkey) -> Pubkey:
        return stake_address(self.program_id, self.treasury_address(run), wallet)

    def join_authorization_address(self, run: Pubkey, wallet: Pubkey) -> Pubkey:
        """The coordinator's JoinAuthorization of (run, wallet), which the treasurer grants to staked wallets."""
        return Pubkey.find_program_address(
            [b"join", bytes(run), bytes(wallet)], self.coordinator_id
        )[0]

    def decode_stake(self, data: bytes) -> dict[str, Any]:
        return self.idl.decode_account("Stake", data)

    def decode_treasury(self, data: bytes) -> dict[str, Any]:
        return self.idl.decode_account("Treasury", data)

    def decode_member(self, data: bytes) -> dict[str, Any]:
        return self.idl.decode_account("Member", data)

    def settled_points(self, data: bytes) -> int:
        """Points.points of a coordinator Points account (its layout is in this IDL's types)."""
        return self.idl.decode({"defined": {"name": "Points"}}, data, 8)[0]["points"]

    def failure(self, logs: Sequence[str]) -> ProgramError | None:
        """The treasurer's own error in a failed transaction's logs, if it is the program that failed."""
        pattern = re.compile(
            rf"Program {self.program_id} failed: custom program error: 0x([0-9a-f]+)"
        )
        for line in logs:
            match = pattern.search(line)
            known = self.idl.error(int(match.group(1), 16)) if match else None
            if known is not None:
                return ProgramError(known.code, known.name, known.msg, list(logs))
        return None

    def check_treasury(self, treasury: dict[str, Any]) -> None:
        """A treasury pays the points of the program that owned its run when it was created: refuse one
        bound to another coordinator than ours (a look-alike run)."""
        if treasury["coordinator"] != self.coordinator_id:
            raise ValueError(
                f"treasury pays points of {treasury['coordinator']}, not of {self.coordinator_id}"
            )

    def entitlement(
        self, treasury: dict[str, Any], member: dict[str, Any] | None, points: int | None
    ) -> Entitlement:
        return Entitlement(
            points or 0, treasury["reward_per_point"], member["claimed"] if member else 0
        )

    # -- instructions -----------------------------------------------------------------------------------
    def init_treasury(self, payer: Pubkey, authority: Pubkey, run: Pubkey, mint: Pubkey, token_program: Pubkey,
                      reward_per_point: int, claim_window: int) -> Instruction:  # fmt: skip
        treasury = self.treasury_address(run)
        accounts = ix.InitTreasuryAccounts(
            payer=payer, authority=authority, run=run, treasury=treasury,
            vault=vault_address(self.program_id, treasury), mint=mint, token_program=token_program,
        )  # fmt: skip
        args = ix.InitTreasuryArgs(reward_per_point=reward_per_point, claim_window=claim_window)
        return ix.init_treasury(self.program_id, accounts, args)

    def fund(
        self, run: Pubkey, treasury: dict[str, Any], funder: Pubkey, source: Pubkey, amount: int
    ) -> Instruction:
        accounts = ix.FundAccounts(
            funder=funder, source=source, treasury=self.treasury_address(run), vault=treasury["vault"],
            mint=treasury["mint"], token_program=treasury["token_program"],
        )  # fmt: skip
        return ix.fund(self.program_id, accounts, ix.FundArgs(amount=amount))

    def set_rate(self, run: Pubkey, authority: Pubkey, reward_per_point: int) -> Instruction:
        accounts = ix.SetRateAccounts(
            authority=authority, run=run, treasury=self.treasury_address(run)
        )
        return ix.set_rate(
            self.program_id, accounts, ix.SetRateArgs(reward_per_point=reward_per_point)
        )

    def register_claim_key(self, run: Pubkey, wallet: Pubkey, claim_key: Pubkey) -> Instruction:
        treasury = self.treasury_address(run)
        accounts = ix.RegisterClaimKeyAccounts(
            wallet=wallet,
            treasury=treasury,
            member=member_address(self.program_id, treasury, wallet),
        )
        return ix.register_claim_key(
            self.program_id, accounts, ix.RegisterClaimKeyArgs(claim_key=claim_key)
        )

    def claim(self, run: Pubkey, treasury: dict[str, Any], wallet: Pubkey, claim_key: Pubkey, destination: Pubkey,
              amount: int) -> Instruction:  # fmt: skip
        accounts = ix.ClaimAccounts(
            claim_key=claim_key, treasury=self.treasury_address(run), member=self.member_address(run, wallet),
            points=self.points_address(run, wallet), vault=treasury["vault"], destination=destination,
            mint=treasury["mint"], token_program=treasury["token_program"],
        )  # fmt: skip
        return ix.claim(self.program_id, accounts, ix.ClaimArgs(amount=amount))

    def mark_run_closed(self, run: Pubkey) -> Instruction:
        accounts = ix.MarkRunClosedAccounts(treasury=self.treasury_address(run), run=run)
        return ix.mark_run_closed(self.program_id, accounts)

    def close_treasury(
        self, run: Pubkey, treasury: dict[str, Any], destination: Pubkey
    ) -> Instruction:
        accounts = ix.CloseTreasuryAccounts(
            authority=treasury["authority"], treasury=self.treasury_address(run), vault=treasury["vault"],
            destination=destination, rent_recipient=treasury["payer"],
            # without stakes any account will do: the vault, already named
            stake_vault=treasury["stake_vault"] if treasury["stake_vault"] != Pubkey.default()
            else treasury["vault"],
            mint=treasury["mint"], token_program=treasury["token_program"],
        )  # fmt: skip
        return ix.close_treasury(self.program_id, accounts)

    def close_member(self, run: Pubkey, wallet: Pubkey) -> Instruction:
        accounts = ix.CloseMemberAccounts(
            wallet=wallet, member=self.member_address(run, wallet), treasury=self.treasury_address(run),
            points=self.points_address(run, wallet),
        )  # fmt: skip
        return ix.close_member(self.program_id, accounts)

    # -- stakes ------------------------------------------------------------------------------------------
    def _joiner_accounts(self, run: Pubkey, wallet: Pubkey) -> dict[str, Pubkey]:
        return {"run": run, "authorization": self.join_authorization_address(run, wallet),
                "joiner": self.joiner_address(run), "coordinator_program": self.coordinator_id}  # fmt: skip

    def init_stakes(self, payer: Pubkey, authority: Pubkey, run: Pubkey, treasury: dict[str, Any], stake_amount: int,
                    unstake_delay: int) -> Instruction:  # fmt: skip
        accounts = ix.InitStakesAccounts(
            payer=payer, authority=authority, run=run, treasury=self.treasury_address(run),
            stake_vault=self.stake_vault_address(run), mint=treasury["mint"], token_program=treasury["token_program"],
        )  # fmt: skip
        args = ix.InitStakesArgs(stake_amount=stake_amount, unstake_delay=unstake_delay)
        return ix.init_stakes(self.program_id, accounts, args)

    def stake(
        self, run: Pubkey, treasury: dict[str, Any], wallet: Pubkey, source: Pubkey
    ) -> Instruction:
        accounts = ix.StakeAccounts(
            wallet=wallet, source=source, treasury=self.treasury_address(run), stake=self.stake_address(run, wallet),
            stake_vault=treasury["stake_vault"], mint=treasury["mint"], token_program=treasury["token_program"],
            **self._joiner_accounts(run, wallet),
        )  # fmt: skip
        return ix.stake(self.program_id, accounts)

    def unstake(self, run: Pubkey, wallet: Pubkey) -> Instruction:
        accounts = ix.UnstakeAccounts(wallet=wallet, treasury=self.treasury_address(run),
                                      stake=self.stake_address(run, wallet), **self._joiner_accounts(run, wallet))  # fmt: skip
        return ix.unstake(self.program_id, accounts)

    def withdraw_stake(
        self, run: Pubkey, treasury: dict[str, Any], wallet: Pubkey, destination: Pubkey
    ) -> Instruction:
        accounts = ix.WithdrawStakeAccounts(
            wallet=wallet, treasury=self.treasury_address(run), stake=self.stake_address(run, wallet),
            stake_vault=treasury["stake_vault"], destination=destination, mint=treasury["mint"],
            token_program=treasury["token_program"],
        )  # fmt: skip
        return ix.withdraw_stake(self.program_id, accounts)

    def slash(
        self, run: Pubkey, treasury: dict[str, Any], reporter: Pubkey, wallet: Pubkey, index: int
    ) -> Instruction:
        """Slash `wallet`'s stake: the Run's epoch client at `index` is it, convicted."""
        accounts = ix.SlashAccounts(
            reporter=reporter, treasury=self.treasury_address(run), stake=self.stake_address(run, wallet),
            stake_vault=treasury["stake_vault"], vault=treasury["vault"], mint=treasury["mint"],
            token_program=treasury["token_program"], **self._joiner_accounts(run, wallet),
        )  # fmt: skip
        return ix.slash(self.program_id, accounts, ix.SlashArgs(index=index))


class TreasurerClient:
    """A treasurer over RPC (`cohort.sdk.rpc.Rpc`): reads a run's treasury and a member's entitlement, and
    sends the member-side instructions."""

    def __init__(self, rpc: Any, treasurer: Treasurer) -> None:
        self.rpc = rpc
        self.treasurer = treasurer

    async def treasury(self, run: Pubkey) -> dict[str, Any] | None:
        data = await self.rpc.account_data(self.treasurer.treasury_address(run))
        if not data:
            return None
        treasury = self.treasurer.decode_treasury(data)
        self.treasurer.check_treasury(treasury)
        return treasury

    async def entitlement(self, run: Pubkey, wallet: Pubkey) -> Entitlement | None:
        treasury = await self.treasury(run)
        if treasury is None:
            return None
        member_data = await self.rpc.account_data(self.treasurer.member_address(run, wallet))
        points_data = await self.rpc.account_data(self.treasurer.points_address(run, wallet))
        member = self.treasurer.decode_member(member_data) if member_data else None
        points = self.treasurer.settled_points(points_data) if points_data else 0
        return self.treasurer.entitlement(treasury, member, points)

    async def send(self, instructions: Sequence[Instruction], payer: Keypair,
                   signers: Sequence[Keypair] = ()) -> Signature:  # fmt: skip
        """Send; a failure of the treasurer itself is raised as a ProgramError named from its IDL (the Rpc
        names errors from the coordinator's)."""
        try:
            return await self.rpc.send(instructions, payer, signers)
        except TransactionFailed as e:
            raise self.treasurer.failure(e.logs) or e from e

    async def register_claim_key(
        self, run: Pubkey, wallet: Keypair, claim_key: Pubkey
    ) -> Signature:
        return await self.send(
            [self.treasurer.register_claim_key(run, wallet.pubkey(), claim_key)], wallet
        )

    async def claim(self, run: Pubkey, wallet: Pubkey, claim_key: Keypair, destination: Pubkey,
                    amount: int | None = None) -> Signature:  # fmt: skip
        """Claim `amount` (default: everything claimable now), signed and paid by the claim key."""
        treasury = await self.treasury(run)
        if treasury is None:
            raise ValueError(f"run {run} has no treasury")
        if amount is None:
            owed = await self.entitlement(run, wallet)
            amount = owed.claimable if owed else 0
        instruction = self.treasurer.claim(
            run, treasury, wallet, claim_key.pubkey(), destination, amount
        )
        return await self.send([instruction], claim_key)
