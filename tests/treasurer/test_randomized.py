"""A randomized test of the treasurer (a fuzzer): seeded random interleavings of fund, set_rate,
register_claim_key, claim, init_stakes, stake, unstake, withdraw_stake, slash, mark_run_closed,
close_treasury and close_member — by the right signers and by wrong ones, with amounts below, at and
beyond what is allowed — with the coordinator's life: staked wallets join and play epochs, points are
settled (settle_points, claim_points, exit_run), members equivocate and are convicted, clock jumps, and
the run is closed (then Points accounts are closed).

A small Python model says what the treasurer must hold (its Treasury's fields, every Member and Stake
account, every token balance) and, for each operation, whether it succeeds or which named error it
fails with; the chain must agree. After every step: the model and the chain's accounts are equal, tokens
are conserved (every token account the test made + the vault + the stake vault = what was minted: the
treasurer burns nothing), no member was paid more than its settled points × the rate, a Staked stake is
exactly a wallet with a JoinAuthorization, and every transaction conserves lamports over the accounts it
names (less its fee). A failed instruction changes no byte of any account the test knows.
On a failure the seed, the step and the operations so far are printed.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field

import pytest
from solders.instruction import AccountMeta, Instruction
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from support.coordinator_chain import (
    ProgramFailed,
    equivocation,
    finish_epoch,
    make_config,
    play_round,
    start_pending_round,
)

CONFIG = make_config(3, epoch_time=40, join_policy="Authorized")
# an epoch, its cooldown and a round: the shortest unstake delay init_stakes accepts
FLOOR = (
    CONFIG["epoch_time"]
    + CONFIG["cooldown_time"]
    + CONFIG["max_round_train_time"]
    + CONFIG["round_witness_time"]
)
SEEDS = (1, 2, 3)
OPS = 300
MEMBERS = 6  # wallets that stake, join and earn
TOKEN_ERRORS = {1: "token:InsufficientFunds", 4: "token:OwnerMismatch"}
ZERO = Pubkey.default()
ED25519 = Pubkey.from_string("Ed25519SigVerify111111111111111111111111111")
LAMPORTS_PER_SIGNATURE = 5_000  # LiteSVM charges the fee also when the transaction fails


@dataclass
class Op:
    name: str
    actor: str = ""  # who signs
    target: str = ""  # whose account (when not the actor's)
    amount: int = 0
    extra: dict = field(default_factory=dict)

    def __str__(self) -> str:
        parts = [self.name, self.actor]
        if self.target and self.target != self.actor:
            parts.append(f"-> {self.target}")
        if self.amount or self.name in ("fund", "claim", "set_rate"):
            parts.append(str(self.amount))
        parts += [f"{k}={v}" for k, v in self.extra.items()]
        return " ".join(p for p in parts if p)


@dataclass
class Model:
    """What the treasurer must hold."""

    rate: int
    window: int
    funded: int = 0
    claimed: int = 0
    slashed: int = 0
    closed_at: int = 0
    stake_amount: int = 0
    unstake_delay: int = 0
    treasury_open: bool = True
    run_open: bool = True
    donated: int = 0  # tokens that reached the vault without fund (withdraw_stake's destination)
    balances: dict = field(default_factory=dict)  # token account -> base units
    members: dict = field(default_factory=dict)  # wallet name -> {"claim_key", "claimed"}
    stakes: dict = field(default_factory=dict)  # wallet name -> {"state", "amount", "unstake_at"}


def _swap(ix: Instruction, at: int, key: Pubkey) -> Instruction:
    """The instruction with account `at` replaced (same flags): another wallet's account."""
    metas = list(ix.accounts)
    metas[at] = AccountMeta(key, metas[at].is_signer, metas[at].is_writable)
    return Instruction(ix.program_id, ix.data, metas)


def warmup(chain, run: Pubkey, wallets: list[Keypair], node_keys: dict) -> list[Keypair]:
    """`wallets` join (with these node keys) and the epoch's Warmup starts: a tick once the extra waiting
    time passed, or already the last join when the run has waited long enough (the clock jumps). Returns
    the wallets that joined, in epoch-index order."""
    joined = []
    for wallet in wallets:
        if chain.state(run)["run_state"] != "WaitingForMembers":
            break  # the epoch started with the wallets that joined so far
        chain.join(wallet, run, node_keys[wallet.pubkey()])
        joined.append(wallet)
    if chain.state(run)["run_state"] == "WaitingForMembers":
        chain.advance(CONFIG["waiting_for_members_extra_time"])
        chain.call("tick", wallets[0], run)
    state = chain.state(run)
    assert state["run_state"] == "Warmup" and state["epoch"]["clients_len"] == len(joined)
    by_key = {w.pubkey(): w for w in joined}
    return [by_key[c["signer"]] for c in state["clients"][: len(joined)]]


class Fuzzer:
    def __init__(self, tc, core, seed: int) -> None:
        self.tc, self.core, self.seed = tc, core, seed
        self.chain, self.t = tc.chain, tc.treasurer
        self.rng = random.Random(seed)
        self.ops: list[Op] = []
        self.counts: Counter[tuple[str, str]] = Counter()
        self.fees = 0
        self._audit_sends()
        self._setup()

    # -- lamports: every transaction conserves them over the accounts it names, less its fee -----------
    def _audit_sends(self) -> None:
        chain, send = self.chain, self.chain.send

        def audited(instructions, signers=()):
            keys = {chain.payer.pubkey()}
            signatures = len({chain.payer.pubkey(), *(k.pubkey() for k in signers)}) + sum(
                ix.data[0] for ix in instructions if ix.program_id == ED25519
            )  # a precompile's signatures are paid for too
            fee = LAMPORTS_PER_SIGNATURE * signatures
            for ix in instructions:
                keys.add(ix.program_id)
                keys.update(m.pubkey for m in ix.accounts)
            before = sum(chain.svm.get_balance(k) or 0 for k in keys)
            try:
                result = send(instructions, signers)
            except ProgramFailed:
                after = sum(chain.svm.get_balance(k) or 0 for k in keys)
                assert after + fee == before, "a failed transaction moved lamports (beyond its fee)"
                self.fees += fee
                raise
            after = sum(chain.svm.get_balance(k) or 0 for k in keys)
            self.fees += result.fee()
            assert result.fee() == fee and after + fee == before, (
                f"lamports not conserved: {before} -> {after} + fee {result.fee()}"
            )
            return result

        chain.send = audited

    # -- setup ----------------------------------------------------------------------------------------
    def _setup(self) -> None:
        tc, chain, t, rng = self.tc, self.chain, self.t, self.rng
        self.keys: dict[str, Keypair] = {"auth": chain.wallet()}
        run_key = Keypair()
        self.run = chain.create_run_at(
            run_key, self.keys["auth"], t.joiner_address(run_key.pubkey())
        )
        chain.open_run(self.keys["auth"], self.run, CONFIG)
        self.mint, mint_authority = tc.create_mint()
        self.model = Model(rate=rng.choice([1, 3, 10]), window=rng.choice([0, 30, FLOOR * 2, 400]))
        self.stake_size = rng.choice([100, 250, 500])
        tc.send([t.init_treasury(chain.payer.pubkey(), self.keys["auth"].pubkey(), self.run, self.mint,
                                 tc.token_program, self.model.rate, self.model.window)],
                [self.keys["auth"]])  # fmt: skip
        treasury = tc.treasury(self.run)
        self.treasury_address = t.treasury_address(self.run)
        self.vault = treasury["vault"]
        self.stake_vault = t.stake_vault_address(self.run)
        self.treasury = treasury | {"stake_vault": self.stake_vault}  # for the builders, also later
        self.members = [f"m{i}" for i in range(MEMBERS)]
        self.funders = ["f0", "f1"]
        self.wallets = [*self.members, *self.funders, "x"]  # x: a stranger
        for name in self.wallets:
            self.keys[name] = chain.wallet()
            self.keys["k" + name] = Keypair()  # its claim key (the fee payer pays; it needs no SOL)
        # a token account per wallet and per claim key; members hold some stakes' worth, funders more
        self.accounts: dict[str, Pubkey] = {}
        self.minted = 0
        for name in self.wallets:
            for owner in (name, "k" + name):
                account = tc.token_account(self.mint, self.keys[owner].pubkey())
                self.accounts[owner] = account
                amount = 0  # members hold one to three stakes, but the last less than one
                if owner in self.members:
                    amount = rng.choice([1, 2, 3, 4]) * self.stake_size + rng.randrange(50)
                    if owner == self.members[-1]:
                        amount = rng.randrange(self.stake_size)
                elif owner in self.funders:
                    amount = 10_000 + rng.randrange(10_000)
                if amount:
                    tc.mint_to(self.mint, mint_authority, account, amount)
                self.minted += amount
                self.model.balances[account] = amount
        self.model.balances[self.vault] = 0
        self.phase = "idle"  # idle: WaitingForMembers; mid: an epoch with a conviction; closed
        self.mid_members: list[Keypair] = []
        self.convicted: set[str] = set()
        self.max_points: dict[str, int] = {}

    # -- helpers --------------------------------------------------------------------------------------
    def pk(self, name: str) -> Pubkey:
        return self.keys[name].pubkey()

    def name_of(self, key: Pubkey) -> str | None:
        return next((n for n in self.wallets if self.pk(n) == key), None)

    def points(self, name: str) -> int | None:
        return self.chain.points(self.run, self.pk(name))

    def run_state(self) -> dict | None:
        return self.chain.state(self.run) if self.model.run_open else None

    def registered(self, name: str) -> bool:
        state = self.run_state()
        if state is None:
            return False
        return any(e["signer"] == self.pk(name) for e in state["registry"][: state["registry_len"]])

    def banned(self, name: str, state: dict) -> bool:
        epoch = state["progress"]["epoch"]
        return any(e["signer"] == self.pk(name) and e["banned_until"] > epoch
                   for e in state["registry"][: state["registry_len"]])  # fmt: skip

    def convicted_at(self, name: str, index: int) -> bool:
        """The treasurer's rule: the Run's epoch client at `index` is the wallet, Convicted, or its registry
        entry at `index` is the wallet and records a conviction."""
        state = self.run_state()
        if state is None:
            return False
        key = self.pk(name)
        clients = state["clients"][: state["epoch"]["clients_len"]]
        registry = state["registry"][: state["registry_len"]]
        return (index < len(clients) and clients[index]["signer"] == key
                and clients[index]["state"] == "Convicted") or (
            index < len(registry) and registry[index]["signer"] == key
            and registry[index]["banned_until"] != 0)  # fmt: skip

    def watched(self) -> list[Pubkey]:
        t, run = self.t, self.run
        keys = [self.treasury_address, self.vault, self.stake_vault, run, t.joiner_address(run)]
        keys += list(self.accounts.values())
        for name in self.wallets:
            keys += [t.member_address(run, self.pk(name)), t.stake_address(run, self.pk(name)),
                     t.join_authorization_address(run, self.pk(name)), self.pk(name)]  # fmt: skip
        return keys

    def snapshot(self) -> list:
        svm = self.chain.svm
        return [(self.chain.account_bytes(k), svm.get_balance(k)) for k in self.watched()]

    def expect(self, op: Op, ixs: list, signers: list, expected: str | None, apply=None) -> None:
        """Send; the chain's outcome must be the model's (None: success). A failure changes nothing."""
        before = self.snapshot() if expected is not None else None
        try:
            result = self.tc.send(ixs, signers)
            outcome = None
        except ProgramFailed as e:
            result = None
            outcome = e.name or TOKEN_ERRORS.get(
                e.code, f"custom:{e.code}" if e.code else str(e.err)
            )
        self.counts[(op.name, outcome or "ok")] += 1
        assert outcome == expected, (
            f"{op}: the chain says {outcome or 'success'}, the model {expected or 'success'}"
        )
        if outcome is None:
            if apply is not None:
                apply(result)
        else:
            assert self.snapshot() == before, f"{op}: a failed instruction changed an account"

    def coordinator(self, op: Op, send) -> bool:
        """A coordinator operation: its outcome is recorded, not predicted (the coordinator's own tests
        predict it)."""
        try:
            send()
            outcome = "ok"
        except ProgramFailed as e:
            outcome = e.name or str(e.err)
        self.counts[(op.name, outcome)] += 1
        return outcome == "ok"

    def token_account(self) -> Pubkey:
        return self.accounts[self.rng.choice(list(self.accounts))]

    def move(self, source: Pubkey, destination: Pubkey, amount: int) -> None:
        b = self.model.balances
        b[source] -= amount
        b[destination] = b.get(destination, 0) + amount

    # -- the generator --------------------------------------------------------------------------------
    def next_op(self, i: int) -> Op:
        rng, m = self.rng, self.model
        weights = {"fund": 8, "set_rate": 4, "register_claim_key": 6, "claim": 14, "stake": 8,
                   "unstake": 5, "withdraw_stake": 5, "slash": 6, "mark_run_closed": 2,
                   "close_treasury": 2, "close_member": 3,
                   "init_stakes": 30 if not m.stake_amount else 1}  # fmt: skip
        if self.phase == "idle":
            weights |= {"epoch": 12, "cheat": 4, "settle_points": 8, "claim_points": 2,
                        "exit_run": 4, "join": 2, "warp": 5,
                        "close_run": 3 if i > OPS * 0.55 else 0}  # fmt: skip
        elif self.phase == "mid":
            weights |= {"finish": 12}
        else:
            weights |= {"warp": 8, "close_points": 3, "mark_run_closed": 5, "close_treasury": 4,
                        "close_member": 5}  # fmt: skip
        names = list(weights)
        name = rng.choices(names, [weights[n] for n in names])[0]
        wallet = rng.choice(self.members) if rng.random() < 0.85 else rng.choice(self.wallets)
        other = rng.choice([w for w in self.wallets if w != wallet])
        if name in ("epoch", "cheat") and len(self.joinable()) < 3:
            name = "stake"  # too few staked wallets to play: one more stakes, if one can
            able = [w for w in self.members if w not in m.stakes
                    and m.balances[self.accounts[w]] >= (m.stake_amount or self.stake_size)]  # fmt: skip
            if able:
                return Op(name, rng.choice(able), extra={"source": "own"})
        if name == "fund":
            funder = rng.choice([*self.funders, *self.funders, wallet, "x"])
            source = funder if rng.random() < 0.85 else rng.choice([other, "vault"])
            held = m.balances.get(self.vault if source == "vault" else self.accounts[source], 0)
            amount = rng.choice([0, rng.randint(1, 500), held, held + 1, rng.randint(1, 5_000)])
            return Op(name, funder, source, amount)
        if name == "set_rate":
            signer = rng.choice(["auth", "auth", "auth", wallet])
            return Op(name, signer, amount=max(0, m.rate + rng.choice([-1, 0, 1, 1, 2, 7])))
        if name == "register_claim_key":
            return Op(name, wallet, extra={"zero_key": rng.random() < 0.05})
        if name == "claim":

            def owed(w: str) -> int:
                claimed = m.members[w]["claimed"] if w in m.members else 0
                return max(0, (self.points(w) or 0) * m.rate - claimed)

            registered = [w for w in self.wallets if w in m.members]
            paying = [w for w in registered if owed(w)]
            owner = rng.choices([rng.choice(paying or self.wallets), rng.choice(registered or self.wallets),
                                 wallet], [6, 3, 1])[0]  # fmt: skip
            signer = rng.choices(["k" + owner, "k" + other, owner], [8, 1, 1])[0]
            remaining, vault = owed(owner), m.balances.get(self.vault, 0)
            amount = rng.choice(
                [remaining, remaining, rng.randint(1, remaining), remaining + 1, vault + 1, 0]
                if remaining
                else [1, 1, 7, 0]
            )
            destination = "vault" if rng.random() < 0.05 else rng.choice(list(self.accounts))
            return Op(name, signer, owner, amount, {"to": destination})
        if name == "init_stakes":
            signer = "auth" if rng.random() < 0.8 else wallet
            delay = rng.choice([FLOOR, FLOOR + rng.randrange(100), FLOOR - 1, -1])
            amount = self.stake_size if rng.random() < 0.9 else 0
            return Op(name, signer, amount=amount, extra={"delay": delay})
        if name == "stake":
            unstaked = [w for w in self.members if w not in m.stakes]
            if unstaked and rng.random() < 0.7:
                wallet = rng.choice(unstaked)
            return Op(name, wallet, extra={"source": "own" if rng.random() < 0.9 else other})
        if name in ("unstake", "close_member"):
            staked = [w for w in self.wallets if w in m.stakes or w in m.members]
            if staked and rng.random() < 0.7:
                wallet = rng.choice(staked)
            target = wallet if rng.random() < 0.9 else other
            return Op(name, wallet, target)
        if name == "withdraw_stake":
            leaving = [w for w, s in m.stakes.items() if s["state"] != "Staked"]
            if leaving and rng.random() < 0.7:
                wallet = rng.choice(leaving)
            target = wallet if rng.random() < 0.9 else other
            destination = rng.choices([wallet, "stake_vault", "vault", other], [16, 1, 1, 2])[0]
            return Op(name, wallet, target, extra={"to": destination})
        if name == "slash":
            if self.convicted and rng.random() < 0.6:
                wallet = rng.choice(sorted(self.convicted))
            elif m.stakes and rng.random() < 0.7:
                wallet = rng.choice(sorted(m.stakes))
            indices = self.indices_of(wallet) or [0]
            index = rng.choice(indices) if rng.random() < 0.8 else rng.randrange(8)
            return Op(name, rng.choice(["x", "f0", other]), wallet, extra={"index": index})
        if name in ("mark_run_closed", "finish", "close_run"):
            return Op(name)
        if name == "close_treasury":
            return Op(name, "auth" if rng.random() < 0.8 else wallet, extra={
                "to": "vault" if rng.random() < 0.05 else rng.choice(list(self.accounts))})  # fmt: skip
        if name in ("epoch", "cheat"):
            return Op(name, amount=rng.choice([3, 3, 4, 5]))
        if name == "warp":
            return Op(name, amount=rng.choice([1, 10, FLOOR // 2, FLOOR, FLOOR + 1, m.window + 1,
                                               300]))  # fmt: skip
        if name in ("settle_points", "claim_points", "exit_run"):  # mostly of a registered wallet
            state = self.run_state()
            registry = state["registry"][: state["registry_len"]]
            owed = [self.name_of(e["signer"]) for e in registry if e["earned"]]
            registered = [self.name_of(e["signer"]) for e in registry]
            if name == "settle_points":
                if owed and rng.random() < 0.9:
                    wallet = rng.choice(owed)
                return Op(name, rng.choice(self.wallets), wallet)
            if registered and rng.random() < 0.85:
                wallet = rng.choice(registered)
            return Op(name, wallet)
        return Op(name, wallet)  # claim_points, exit_run, join, close_points

    def indices_of(self, name: str) -> list[int]:
        state = self.run_state()
        if state is None:
            return []
        key = self.pk(name)
        clients = state["clients"][: state["epoch"]["clients_len"]]
        registry = state["registry"][: state["registry_len"]]
        return [i for i, c in enumerate(clients) if c["signer"] == key] + [
            i for i, e in enumerate(registry) if e["signer"] == key
        ]

    # -- the treasurer's instructions ----------------------------------------------------------------
    def do_fund(self, op: Op) -> None:
        m = self.model
        source = self.vault if op.target == "vault" else self.accounts[op.target]
        ix = self.t.fund(self.run, self.treasury, self.pk(op.actor), source, op.amount)
        if op.amount == 0:
            expected = "ZeroAmount"
        elif not m.treasury_open:
            expected = "WrongAccountOwner"
        elif source == self.vault:
            expected = "WrongVault"
        elif op.amount > m.balances[source]:
            expected = "token:InsufficientFunds"
        elif op.target != op.actor:
            expected = "token:OwnerMismatch"
        else:
            expected = None

        def apply(_):
            m.funded += op.amount
            self.move(source, self.vault, op.amount)

        self.expect(op, [ix], [self.keys[op.actor]], expected, apply)

    def do_set_rate(self, op: Op) -> None:
        m = self.model
        ix = self.t.set_rate(self.run, self.pk(op.actor), op.amount)
        expected = (
            "WrongAccountOwner" if not m.treasury_open
            else "WrongCoordinator" if not m.run_open
            else "Unauthorized" if op.actor != "auth"
            else "RateLowered" if op.amount < m.rate
            else "NoChange" if op.amount == m.rate
            else None
        )  # fmt: skip
        self.expect(op, [ix], [self.keys[op.actor]], expected,
                    lambda _: setattr(m, "rate", op.amount))  # fmt: skip

    def do_register_claim_key(self, op: Op) -> None:
        m = self.model
        key = ZERO if op.extra["zero_key"] else self.pk("k" + op.actor)
        ix = self.t.register_claim_key(self.run, self.pk(op.actor), key)
        expected = (
            "InvalidClaimKey" if key == ZERO
            else "WrongAccountOwner" if not m.treasury_open
            else "AlreadyInitialized" if op.actor in m.members
            else None
        )  # fmt: skip

        def apply(_):
            m.members[op.actor] = {"claim_key": key, "claimed": 0}

        self.expect(op, [ix], [self.keys[op.actor]], expected, apply)

    def do_claim(self, op: Op) -> None:
        m, owner = self.model, op.target
        destination = self.vault if op.extra["to"] == "vault" else self.accounts[op.extra["to"]]
        ix = self.t.claim(self.run, self.treasury, self.pk(owner), self.pk(op.actor), destination,
                          op.amount)  # fmt: skip
        member = m.members.get(owner)
        points = self.points(owner)
        remaining = max(0, (points or 0) * m.rate - (member["claimed"] if member else 0))
        expected = (
            "ZeroAmount" if op.amount == 0
            else "WrongAccountOwner" if not m.treasury_open or member is None
            else "WrongClaimKey" if member["claim_key"] != self.pk(op.actor)
            else "WrongVault" if destination == self.vault
            else "WrongCoordinator" if points is None  # no Points account (never settled, or closed)
            else "NothingToClaim" if remaining == 0
            else "BeyondEntitlement" if op.amount > remaining
            else "VaultShort" if op.amount > m.balances[self.vault]
            else None
        )  # fmt: skip

        def apply(_):
            member["claimed"] += op.amount
            m.claimed += op.amount
            self.move(self.vault, destination, op.amount)

        self.expect(op, [ix], [self.keys[op.actor]], expected, apply)

    def do_init_stakes(self, op: Op) -> None:
        m, delay = self.model, op.extra["delay"]
        ix = self.t.init_stakes(self.chain.payer.pubkey(), self.pk(op.actor), self.run,
                                self.treasury, op.amount, delay)  # fmt: skip
        expected = (
            "WrongAccountOwner" if not m.treasury_open
            else "AlreadyInitialized" if m.stake_amount
            else "WrongCoordinator" if not m.run_open
            else "Unauthorized" if op.actor != "auth"
            else "InvalidRate" if op.amount == 0 or delay < 0
            else "DelayTooShort" if delay < FLOOR
            else None
        )  # fmt: skip

        def apply(_):
            m.stake_amount, m.unstake_delay = op.amount, delay
            m.balances[self.stake_vault] = 0

        self.expect(op, [ix], [self.keys[op.actor]], expected, apply)

    def do_stake(self, op: Op) -> None:
        m, owner = self.model, op.extra["source"]
        owner = op.actor if owner == "own" else owner
        source = self.accounts[owner]
        ix = self.t.stake(self.run, self.treasury, self.pk(op.actor), source)
        expected = (
            "WrongAccountOwner" if not m.treasury_open
            else "StakesOff" if not m.stake_amount
            else "AlreadyInitialized" if op.actor in m.stakes
            else "token:InsufficientFunds" if m.balances[source] < m.stake_amount
            else "token:OwnerMismatch" if owner != op.actor
            # the coordinator refuses the treasurer's set_join_authorization: no Run any more
            else "WrongAccountOwner" if not m.run_open
            else None
        )  # fmt: skip

        def apply(_):
            m.stakes[op.actor] = {"state": "Staked", "amount": m.stake_amount, "unstake_at": 0}
            self.move(source, self.stake_vault, m.stake_amount)

        self.expect(op, [ix], [self.keys[op.actor]], expected, apply)

    def do_unstake(self, op: Op) -> None:
        m = self.model
        ix = self.t.unstake(self.run, self.pk(op.actor))
        if op.target != op.actor:  # another wallet's stake
            ix = _swap(ix, 2, self.t.stake_address(self.run, self.pk(op.target)))
        stake = m.stakes.get(op.target)
        expected = (
            "WrongAccountOwner" if not m.treasury_open or stake is None
            else "WrongPda" if op.target != op.actor
            else "WrongStakeState" if stake["state"] != "Staked"
            else "StillInRun" if self.registered(op.actor)
            else None
        )  # fmt: skip

        def apply(_):
            stake["state"], stake["unstake_at"] = "Unstaking", self.chain.now + m.unstake_delay

        self.expect(op, [ix], [self.keys[op.actor]], expected, apply)

    def do_withdraw_stake(self, op: Op) -> None:
        m, to = self.model, op.extra["to"]
        destination = {"vault": self.vault, "stake_vault": self.stake_vault}.get(to) or (
            self.accounts[to]
        )
        ix = self.t.withdraw_stake(self.run, self.treasury, self.pk(op.actor), destination)
        if op.target != op.actor:
            ix = _swap(ix, 2, self.t.stake_address(self.run, self.pk(op.target)))
        stake = m.stakes.get(op.target)
        state = stake["state"] if stake else None
        expected = (
            "WrongAccountOwner" if not m.treasury_open or stake is None
            else "WrongPda" if op.target != op.actor
            else "WrongStakeState" if state == "Staked"
            else "WrongVault" if state == "Unstaking" and destination == self.stake_vault
            else "StakeLocked" if state == "Unstaking" and self.chain.now < stake["unstake_at"]
            else None
        )  # fmt: skip

        def apply(_):
            if state == "Unstaking":
                self.move(self.stake_vault, destination, stake["amount"])
                if destination == self.vault:
                    m.donated += stake["amount"]
            del m.stakes[op.actor]

        self.expect(op, [ix], [self.keys[op.actor]], expected, apply)

    def do_slash(self, op: Op) -> None:
        m, index = self.model, op.extra["index"]
        ix = self.t.slash(self.run, self.treasury, self.pk(op.actor), self.pk(op.target), index)
        stake = m.stakes.get(op.target)
        expected = (
            "WrongAccountOwner" if not m.treasury_open or stake is None
            else "WrongStakeState" if stake["state"] == "Slashed"
            else "WrongCoordinator" if not m.run_open
            else "NotConvicted" if not self.convicted_at(op.target, index)
            else None
        )  # fmt: skip

        def apply(_):
            self.move(self.stake_vault, self.vault, stake["amount"])
            m.slashed += stake["amount"]
            stake["state"], stake["amount"] = "Slashed", 0

        self.expect(op, [ix], [self.keys[op.actor]], expected, apply)

    def do_mark_run_closed(self, op: Op) -> None:
        m = self.model
        expected = (
            "WrongAccountOwner" if not m.treasury_open
            else "NoChange" if m.closed_at
            else "RunStillOpen" if m.run_open
            else None
        )  # fmt: skip
        self.expect(op, [self.t.mark_run_closed(self.run)], [], expected,
                    lambda _: setattr(m, "closed_at", max(self.chain.now, 1)))  # fmt: skip

    def do_close_treasury(self, op: Op) -> None:
        m, to = self.model, op.extra["to"]
        destination = self.vault if to == "vault" else self.accounts[to]
        treasury = self.treasury | {"authority": self.pk(op.actor)}
        ix = self.t.close_treasury(self.run, treasury, destination)
        expected = (
            "WrongAccountOwner" if not m.treasury_open
            else "Unauthorized" if op.actor != "auth"
            else "WrongVault" if destination == self.vault
            else "RunStillOpen" if not m.closed_at
            else "ClaimWindowOpen" if self.chain.now < m.closed_at + m.window
            # closing it would strand the stakes: withdraw_stake needs the Treasury
            else "StakesRemain" if m.stake_amount and self.staked_tokens()
            else None
        )  # fmt: skip

        def apply(_):
            for vault in (self.vault, self.stake_vault):  # the stake vault holds no stake by now
                if vault in m.balances:
                    self.move(vault, destination, m.balances[vault])
                    del m.balances[vault]
            m.treasury_open = False

        self.expect(op, [ix], [self.keys[op.actor]], expected, apply)

    def staked_tokens(self) -> int:
        """Tokens the stake vault holds for Staked and Unstaking stakes: their wallets' to withdraw."""
        return sum(s["amount"] for s in self.model.stakes.values() if s["state"] != "Slashed")

    def do_close_member(self, op: Op) -> None:
        m = self.model
        ix = self.t.close_member(self.run, self.pk(op.actor))
        if op.target != op.actor:
            ix = _swap(ix, 1, self.t.member_address(self.run, self.pk(op.target)))
        expected = (
            "WrongAccountOwner" if op.target not in m.members
            else "WrongPda" if op.target != op.actor
            else "PointsRemain" if m.treasury_open and self.points(op.actor) is not None
            else None
        )  # fmt: skip
        self.expect(op, [ix], [self.keys[op.actor]], expected,
                    lambda _: m.members.pop(op.actor))  # fmt: skip

    # -- the coordinator's life -----------------------------------------------------------------------
    def joinable(self) -> list[str]:
        state = self.run_state()
        return [w for w in self.members
                if self.model.stakes.get(w, {}).get("state") == "Staked" and not self.banned(w, state)]  # fmt: skip

    def start_epoch(self, op: Op) -> tuple[list, dict] | None:
        """`op.amount` staked wallets (at least 3) join and the epoch's first round starts: its members and
        their node keys; None (counted) when fewer than 3 are staked."""
        ready = self.joinable()
        if len(ready) < 3:
            self.counts[(op.name, "too few staked")] += 1
            return None
        chain, run = self.chain, self.run
        wallets = [self.keys[w] for w in self.rng.sample(ready, min(op.amount, len(ready)))]
        node_keys = {w.pubkey(): Keypair() for w in wallets}
        members = warmup(chain, run, wallets, node_keys)
        for index in range(CONFIG["witness_nodes"]):
            chain.call("warmup_witness", members[index], run, {"index": index})
        assert start_pending_round(chain, run, members[0])
        return members, node_keys

    def do_epoch(self, op: Op) -> None:
        """Staked wallets join and play a whole epoch: every one earns points."""
        if (started := self.start_epoch(op)) is None:
            return
        finish_epoch(self.chain, self.core, self.run, started[0])
        self.counts[(op.name, "ok")] += 1

    def do_cheat(self, op: Op) -> None:
        """Staked wallets start an epoch and play a round; then one equivocates (two signed results of one
        step) and is convicted. The epoch goes on (finish) while the treasurer's operations go on."""
        if (started := self.start_epoch(op)) is None:
            return
        members, node_keys = started
        chain, run = self.chain, self.run
        play_round(chain, self.core, run, members)
        index = self.rng.randrange(len(members))
        cheat = members[index]
        reporter = self.keys[self.rng.choice(self.wallets)]
        chain.send(equivocation(chain, run, node_keys[cheat.pubkey()], index, reporter), [reporter])
        assert chain.state(run)["clients"][index]["state"] == "Convicted"
        self.convicted.add(self.name_of(cheat.pubkey()))
        self.mid_members, self.phase = members, "mid"
        self.counts[(op.name, "ok")] += 1

    def do_finish(self, op: Op) -> None:
        finish_epoch(self.chain, self.core, self.run, self.mid_members)
        self.phase = "idle"
        self.counts[(op.name, "ok")] += 1

    def do_settle_points(self, op: Op) -> None:
        self.coordinator(op, lambda: self.chain.settle_points(self.keys[op.actor], self.run,
                                                              self.pk(op.target)))  # fmt: skip

    def do_claim_points(self, op: Op) -> None:
        self.coordinator(op, lambda: self.chain.call("claim_points", self.keys[op.actor], self.run))

    def do_exit_run(self, op: Op) -> None:
        self.coordinator(op, lambda: self.chain.call("exit_run", self.keys[op.actor], self.run))

    def do_close_points(self, op: Op) -> None:
        points = self.chain.points_address(self.run, self.pk(op.actor))
        self.coordinator(op, lambda: self.chain.call("close_points", self.keys[op.actor], self.run,
                                                     points=points))  # fmt: skip

    def do_join(self, op: Op) -> None:
        """A join without a Staked stake (no JoinAuthorization) is refused by the coordinator."""
        if self.model.stakes.get(op.actor, {}).get("state") == "Staked":
            self.counts[(op.name, "skipped: staked")] += 1
            return
        joined = self.coordinator(op, lambda: self.chain.join(self.keys[op.actor], self.run))
        assert not joined, f"{op}: a wallet without a stake joined"

    def do_warp(self, op: Op) -> None:
        self.chain.advance(op.amount)
        self.counts[(op.name, "ok")] += 1

    def do_close_run(self, op: Op) -> None:
        chain, auth = self.chain, self.keys["auth"]
        state = chain.state(self.run)
        for entry in state["registry"][: state["registry_len"]]:  # a run closes with no points owed
            if entry["earned"]:
                chain.settle_points(auth, self.run, entry["signer"])
        chain.call("set_paused", auth, self.run, {"paused": True})
        chain.call("close_run", auth, self.run, run_index=chain.run_index_address(b"test-run"),
                   recipient=auth.pubkey())  # fmt: skip
        assert chain.account_bytes(self.run) is None
        self.model.run_open, self.phase = False, "closed"
        self.counts[(op.name, "ok")] += 1

    # -- invariants -----------------------------------------------------------------------------------
    def check(self) -> None:
        tc, t, m, run = self.tc, self.t, self.model, self.run
        # tokens: the model's balances are the chain's, and nothing was created or destroyed
        balances = {a: tc.balance(a) if self.chain.account_bytes(a) else 0 for a in m.balances}
        assert balances == m.balances, "token balances differ from the model"
        assert sum(balances.values()) == self.minted, "tokens were created or destroyed"
        if m.stake_amount and m.treasury_open:
            assert balances[self.stake_vault] == self.staked_tokens(), (
                "the stake vault is not the stakes"
            )
        # the treasury
        data = self.chain.account_bytes(self.treasury_address)
        if not m.treasury_open:
            assert data is None and self.chain.account_bytes(self.vault) is None
        else:
            treasury = t.decode_treasury(data)
            got = {k: treasury[k] for k in ("reward_per_point", "claim_window", "closed_at", "funded",
                                            "claimed", "slashed", "stake_amount", "unstake_delay",
                                            "staked")}  # fmt: skip
            assert got == {"reward_per_point": m.rate, "claim_window": m.window,
                           "closed_at": m.closed_at, "funded": m.funded, "claimed": m.claimed,
                           "slashed": m.slashed, "stake_amount": m.stake_amount,
                           "unstake_delay": m.unstake_delay,
                           "staked": self.staked_tokens()}, f"treasury {got}"  # fmt: skip
            assert balances[self.vault] == m.funded + m.slashed + m.donated - m.claimed
        for name in self.wallets:
            key = self.pk(name)
            member = tc.member(run, key)
            want = m.members.get(name)
            assert (member is None) == (want is None), f"{name}: Member account"
            if member is not None:
                assert (member["claim_key"], member["claimed"]) == (
                    want["claim_key"],
                    want["claimed"],
                ), f"{name}: Member {member}"
            points = self.points(name)
            if points is not None:  # settled points only grow; nobody is paid beyond them
                assert points >= self.max_points.get(name, 0), f"{name}: settled points shrank"
                self.max_points[name] = points
                if want is not None:
                    assert want["claimed"] <= points * m.rate, f"{name}: paid beyond its points"
            else:
                self.max_points.pop(name, None)
            data = self.chain.account_bytes(t.stake_address(run, key))
            stake = m.stakes.get(name)
            assert (data is None) == (stake is None), f"{name}: Stake account"
            if data is not None:
                got = t.decode_stake(data)
                assert (got["state"], got["amount"], got["unstake_at"]) == (
                    stake["state"], stake["amount"], stake["unstake_at"]
                ), f"{name}: Stake {got}"  # fmt: skip
            granted = self.chain.account_bytes(t.join_authorization_address(run, key)) is not None
            staked = stake is not None and stake["state"] == "Staked"
            assert granted == staked, f"{name}: JoinAuthorization {granted}, stake {stake}"

    def run_ops(self, count: int) -> None:
        for i in range(count):
            op = self.next_op(i)
            self.ops.append(op)
            try:
                getattr(self, "do_" + op.name)(op)
                self.check()
            except Exception as e:
                listing = "\n".join(f"  {k:3d} {o}" for k, o in enumerate(self.ops))
                message = (
                    f"seed {self.seed} ({self.tc.token_program}), step {i}: {op}\n{e}\n"
                    f"operations so far:\n{listing}"
                )
                print(message)
                raise AssertionError(message) from e

    def summary(self) -> str:
        kinds = sorted({name for name, _ in self.counts})
        lines = []
        for kind in kinds:
            outcomes = {o: n for (k, o), n in self.counts.items() if k == kind}
            lines.append(f"  {kind}: " + ", ".join(f"{o} {n}" for o, n in sorted(outcomes.items())))
        return "\n".join(lines)


@pytest.mark.parametrize("seed", SEEDS)
def test_random_interleavings_of_the_treasurer_and_the_coordinators_epochs(tc, core, seed):
    fuzzer = Fuzzer(tc, core, seed)
    fuzzer.run_ops(OPS)
    print(f"\nseed {seed}, {tc.token_program}, fees {fuzzer.fees}:\n{fuzzer.summary()}")
    ok = {kind for (kind, outcome), n in fuzzer.counts.items() if outcome == "ok"}
    assert {"fund", "claim", "stake", "register_claim_key", "epoch"} <= ok, (
        f"the generator exercised too little:\n{fuzzer.summary()}"
    )
    errors = {outcome for (_, outcome) in fuzzer.counts if outcome != "ok"}
    assert len(errors) >= 8, f"too few distinct errors: {sorted(errors)}"
