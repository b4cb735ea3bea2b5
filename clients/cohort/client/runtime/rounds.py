"""What the chain says about the rounds of the current epoch, decided only from chain state: the pure core
the client's state machine reads. Everything here uses the coordinator's host build, the chain's own code.

A round of height h trains step s = start_step + h. Its seated witnesses attest the results of step s-1
(a participants bitmap and the sha256 of their results list); the first results root a strict majority of
the seats holds is step s-1's applied set, and ends the round. Seeds and trainers are known one round
ahead: while round h runs, round h+1's (`Run.next_seed`, `Run.next_mask`) are fixed too, so a client can
train step s+1 as soon as it has trained s and applied s-1.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from cohort.sdk.coordinator_core import CoordinatorCore
from cohort.sdk.models import Client, Run, RunState, WitnessRecord

ROUND_PHASES = (RunState.RoundTrain, RunState.RoundWitness)


def round_step(run: Run) -> int:
    """The step of the run's newest stored round. The step counter moves on when a round ends, before the
    next round exists: in Cooldown, and while the next round's seed is pending."""
    ended = run.state == RunState.Cooldown or (
        run.state == RunState.RoundWitness and run.seed_pending
    )
    return run.progress.step - 1 if ended else run.progress.step


def trains(run: Run, step: int) -> bool:
    """Whether step `step` is trained: not the flush round that ends an epoch (last_step - 1), which only
    attests the last trained step."""
    return run.last_step == 0 or step < run.last_step - 1


@dataclass(frozen=True)
class RoundView:
    """One round of the current epoch: stored on chain, or the next one (known one round ahead)."""

    height: int
    step: int
    seed: int
    active_mask: bytes
    assignment: Mapping[int, tuple[int, int]]  # epoch index -> its batch [start, end)
    decided: bool = False
    decided_root: bytes = bytes(32)
    weights_digest: int = (
        0  # what a strict majority of seats reported (valid when digest_votes > 0)
    )
    digest_votes: int = 0
    witnesses_len: int = 0
    records: tuple[WitnessRecord, ...] | None = None  # None: not read (a hot-prefix Run)
    stored: bool = True  # False for the next round, which the chain has not started yet

    def active(self, index: int) -> bool:
        return bool(self.active_mask[index // 8] >> (index % 8) & 1)


def stored_rounds(core: CoordinatorCore, run: Run) -> dict[int, RoundView]:
    """The epoch's stored rounds by step (none in Warmup: the epoch has no round yet)."""
    if run.state not in (*ROUND_PHASES, RunState.Cooldown):
        return {}
    out = {}
    newest = round_step(run)
    for back, summary in enumerate(run.rounds):
        raw = core.round_bytes(run.data[8:], back)
        if raw is None:
            break
        out[newest - back] = RoundView(
            summary.height, newest - back, summary.random_seed, summary.active_mask,
            core.assignment(run.data[8:], raw),
            summary.decided, summary.decided_root, summary.weights_digest, summary.digest_votes,
            summary.witnesses_len, summary.records if run.fresh_records else None,
        )  # fmt: skip
    return out


def next_round(core: CoordinatorCore, run: Run) -> RoundView | None:
    """The round after the newest stored one, while a round runs: its seed and trainers were fixed when
    the newest started, so its assignment is known before the chain starts it."""
    if run.state not in ROUND_PHASES:
        return None
    raw = core.round_bytes(run.data[8:], 0)
    if raw is None:
        return None
    idl = core.idl
    current = run.rounds[0]
    data_index = current.data_index + current.batch_size
    patched = bytearray(raw)

    def put(name: str, value: bytes) -> None:
        at = idl.offset_of("Round", name)
        patched[at : at + len(value)] = value

    put("active_mask", run.next_mask)
    put("data_index", data_index.to_bytes(8, "little"))
    put("random_seed", run.next_seed.to_bytes(8, "little"))
    put("batch_size", core.batch_size(run.data[8:], data_index).to_bytes(4, "little"))
    return RoundView(current.height + 1, round_step(run) + 1, run.next_seed, run.next_mask,
                     core.assignment(run.data[8:], bytes(patched)), stored=False)  # fmt: skip


@dataclass(frozen=True)
class ChainView:
    """A Run as the client machine reads it: the rounds by step and this client's place."""

    run: Run
    me: Client | None
    rounds: Mapping[int, RoundView] = field(default_factory=dict)  # stored rounds, and the next one
    newest: int | None = None  # step of the newest stored round
    quorum: int = 1
    ended: ChainView | None = (
        None  # in WaitingForMembers: the epoch that just ended, as its Cooldown left it
    )

    @property
    def current(self) -> RoundView | None:
        return self.rounds.get(self.newest) if self.newest is not None else None

    def healthy(self, index: int) -> bool:
        return index < len(self.run.clients) and self.run.clients[index].healthy


def observe(core: CoordinatorCore, run: Run, wallet: object) -> ChainView:
    rounds = stored_rounds(core, run)
    upcoming = next_round(core, run)
    if upcoming is not None:
        rounds[upcoming.step] = upcoming
    newest = round_step(run) if run.state in (*ROUND_PHASES, RunState.Cooldown) else None
    ended = None
    if run.state == RunState.WaitingForMembers and run.rounds:
        # Until the next Warmup the chain keeps the ended epoch's members and rounds (only the phase and the
        # epoch number moved on): a client that never saw its short Cooldown (a far one, a slow RPC) can
        # still finish it from this.
        cooled = replace(
            run,
            state=RunState.Cooldown,
            progress=replace(run.progress, epoch=run.progress.epoch - 1),
        )
        ended = observe(core, cooled, wallet)
    quorum = core.quorum(run.config.witness_nodes)
    return ChainView(run, run.client(wallet), rounds, newest, quorum, ended)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Decision:
    """The chain's word on which results of a step every replica applies."""

    step: int
    root: bytes | None  # the decided results root; None: nothing is applied for this step


def decision(view: ChainView, step: int) -> Decision | None:
    """Step `step`'s applied set, once the chain fixed it: the decided root of the round that attests it
    (round step + 1), or nothing when that round ended undecided or never came (the epoch ended first).
    None while it is still open. A round that left the ring (NUM_ROUNDS) is read from the outcomes the chain
    keeps (`Run.decisions`, DECISION_WINDOW rounds): a view may jump that far and still apply every step;
    raises LookupError beyond that."""
    attesting = view.rounds.get(step + 1)
    run = view.run
    if attesting is None or not attesting.stored:
        kept, root = run.decided(step)
        if kept:
            return Decision(step, root)
    if attesting is not None and attesting.stored:
        if attesting.decided:
            return Decision(step, attesting.decided_root)
        over = view.newest is not None and (
            view.newest > step + 1 or run.seed_pending or run.state == RunState.Cooldown
        )
        return Decision(step, None) if over else None
    if view.newest is not None and step == view.newest and run.state == RunState.Cooldown:
        return Decision(step, None)  # the epoch ended before a round attested it
    if view.newest is not None and step + 1 < min(s for s, r in view.rounds.items() if r.stored):
        raise LookupError(f"the chain no longer holds the round that decided step {step}")
    return None


def unhealthy(view: ChainView, step: int, records: tuple[WitnessRecord, ...]) -> list[int]:
    """Clients the chain would drop for step `step` (its health rule, `coord_health_check`): they trained
    in it, are still healthy, and the round after it (`records` are its seats') left them out: its decided
    set when it decided (a seat's vote is its root with its bitmap), else a strict majority of the seats
    that reported, a convicted member's record counting for nothing."""
    trained, witnessed = view.rounds.get(step), view.rounds.get(step + 1)
    if trained is None or not trained.stored or witnessed is None or not witnessed.stored:
        return []
    clients = view.run.clients
    counted = [
        r for r in records if r.index >= len(clients) or clients[r.index].state != "Convicted"
    ]
    decided = None
    if witnessed.decided:
        votes = [(r.results_root, r.participants) for r in records]
        decided = next((r for r, v in zip(records, votes, strict=True)
                        if v[0] == witnessed.decided_root and votes.count(v) >= view.quorum), None)  # fmt: skip

    def left_out(index: int) -> bool:
        if decided is not None:
            return not decided.saw(index)
        return sum(not r.saw(index) for r in counted) >= view.quorum

    return [c.index for c in clients if c.healthy and trained.active(c.index) and left_out(c.index)]
