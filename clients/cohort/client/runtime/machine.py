"""The training client's state machine: chain state, peer messages, fetch and work completions and the
passing of time go in; actions come out (train step t, publish, fetch, apply, witness, tick, health-check,
leave, checkpoint, vote). No I/O: `runtime/loop.py` follows the chain, feeds `handle` and carries out what
it returns; everything here is decided from what was fed in, so it is tested without chain, peers or model.

The client's behaviour is a function of the newest chain state plus its own progress (steps trained and
applied, records submitted), re-planned after every event: a missed update or a jump of several phases is
caught up on the next one, and nothing is asked twice while it is in flight.

One epoch, in steps (psyche-reference 3.4, with seeds one round ahead):
    train t       as soon as t's batch is known (its round, or the next one), t-1 is trained and t-d applied
                  (d: the run's pipeline_depth, 2 to 4)
    publish t     the payload, announced with a signed statement (two for one step prove equivocation)
    fetch         every expected trainer's result of the live steps, each checked before it is kept (valid or
                  not per (trainer, commitment): a payload names its batch, so a copy is invalid for its copier)
    apply t       once the round that attests t decided it: exactly the decided results list, the same
                  everywhere (fetched by its root when ours differs); a step decided empty applies nothing
    witness       (a seat) step t-1's results once all expected are held, or a bounded grace after a
                  majority arrived; replaced while undecided when more arrived, so honest seats converge
    health-check  what a majority of the previous round's seats left out (the chain's own rule)
    drift         the weights digest a strict majority of seats reported against ours: leave on mismatch
    Cooldown      apply what was decided, write the checkpoint, vote its hash
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from cohort.sdk.coordinator_core import CoordinatorCore, Env
from cohort.sdk.models import RunConfig, RunState, WitnessRecord

from .messages import Result
from .options import ExitCode
from .results_list import ResultsList
from .rounds import ROUND_PHASES, ChainView, decision, trains, unhealthy

# program errors that only mean another client got there first, or the phase moved on meanwhile
LOST_RACE = frozenset({
    "NothingToTick", "InvalidRunState", "DuplicateWitness", "WitnessesFull", "WrongStep", "InvalidHealthCheck",
    "NotInEpoch", "SeedPending", "RoundOver", "NoChange", "AlreadyJoined", "JoinDuringWarmup", "InvalidWitness",
    "VoteClosed", "DuplicateReport", "CheckExpired",
})  # fmt: skip
REFUSALS = {
    "Halted": ExitCode.RUN_HALTED, "Finished": ExitCode.RUN_HALTED, "JoinNotAuthorized": ExitCode.NOT_AUTHORIZED,
    "RunFull": ExitCode.RUN_FULL, "RegistryFull": ExitCode.RUN_FULL,
}  # fmt: skip
SPEED_WINDOW = 16  # trained steps whose median tokens/s a join declares
# applied steps whose lists we keep for the checks their seeds may give us, and for the disputes those checks
# may open (the chain keeps a dispute of step s open until the round of s + DISPUTE_HORIZON, 14)
CHECKED_STEPS = 16


@dataclass(frozen=True)
class Timing:
    """How long the client waits for things (seconds of its own clock)."""

    ready_every: float = (
        1.0  # Ready is re-announced during Warmup after this, then twice as long each
    )
    ready_every_max: float = (
        10.0  # time, up to this (a long Warmup must not use up the per-round gossip cap)
    )
    tick_turn: float = 0.4  # a due tick waits this long per position before this client sends it
    tick_retry: float = (
        0.2  # a tick that landed in the freeze slot itself (SeedPending) is resent soon
    )
    fetch_retry: float = 0.5  # a failed fetch is tried again (other holders) after at most this
    resubmit_every: float = 1.0  # an undecided round's record is replaced at most this often
    tx_retry: float = 1.0

    @staticmethod
    def witness_grace(max_round_train_time: int) -> float:
        """How long a seat waits for the rest once a majority of the expected results is in hand: long
        enough for a slow honest trainer, short enough that withholding costs little (config-derived). The
        epoch's first step (fresh processes, cold caches) is waited for until the training time is up."""
        return max(2.0, max_round_train_time / 3)

    # An announced result is ready: a seat waits for it the time its serving takes from its announcement
    # (`serve_time`), never more than this many graces after the majority. A trainer that announces at once
    # and serves late is left out after that and reported late (the health rule then drops it): it costs
    # a round about its serve time, not the round's training time.
    ANNOUNCED_GRACES = 3
    # (measured at 120 ms one way and 1% loss: a 176 KB result took 1.7 s median, 1.8 s at worst; here 4.1 s)
    serve_grace: float = (
        2.0  # an announced result's fetch: connecting, asking, a busy first holder, loss
    )
    serve_rate: float = (
        256 << 10
    )  # bytes/s every member serves a result at, at least (the fetchers' min_rate)
    SERVE_HOPS = (
        3  # from its author or from one of its first fetchers (the author's copies are limited)
    )

    def serve_time(self, size: int) -> float:
        """How long after its announcement a result of `size` bytes is late at a seat."""
        return self.serve_grace + self.SERVE_HOPS * size / self.serve_rate

    @staticmethod
    def fetch_deadline(max_round_train_time: int) -> float:
        """How long a decided result may take to obtain before we leave rather than diverge."""
        return max(15.0, 2.0 * max_round_train_time)


# -- events: what the loop feeds in ---------------------------------------------------------------------


@dataclass(frozen=True)
class ChainUpdate:
    view: ChainView


@dataclass(frozen=True)
class PeerReady:
    sender: int
    epoch: int


@dataclass(frozen=True)
class PeerResult:
    sender: int
    result: Result  # its statement signature was checked by the exchange


@dataclass(frozen=True)
class ResultHeld:
    step: int
    sender: int
    commitment: bytes  # the payload is in the blob store, checked


@dataclass(frozen=True)
class ResultFailed:
    step: int
    sender: int
    commitment: bytes
    bad: bool  # the payload itself was invalid (not merely unavailable)
    reason: str


@dataclass(frozen=True)
class ListHeld:
    step: int
    root: bytes
    results: ResultsList | None  # None: not obtained (yet)


@dataclass(frozen=True)
class EpochPrepared:
    epoch: int
    ok: bool
    digest: int = 0  # sampled digest of the epoch's starting weights
    reason: str = ""


@dataclass(frozen=True)
class Trained:
    epoch: int
    step: int
    batch: tuple[int, int]
    commitment: bytes
    size: int
    loss: float
    tokens: int
    seconds: float


@dataclass(frozen=True)
class TrainFailed:
    epoch: int
    step: int
    reason: str


@dataclass(frozen=True)
class ApplyFailed:
    """Applying `step`'s decided results failed on the model worker: our weights are no longer the epoch's."""

    epoch: int
    step: int
    reason: str


@dataclass(frozen=True)
class Applied:
    epoch: int
    step: int
    results: int
    digest: int  # sampled digest of the weights after this step


@dataclass(frozen=True)
class Saved:
    epoch: int
    step: int
    manifest: bytes
    digest: str  # sha256 of every parameter (replicas compare it)


@dataclass(frozen=True)
class TxDone:
    kind: str
    key: int
    ok: bool
    error: str = ""  # the program error's name, or "rpc" for a transport failure


@dataclass(frozen=True)
class RecordsRead:
    step: int
    records: tuple[WitnessRecord, ...]


@dataclass(frozen=True)
class StopRequested:
    reason: str = "stop"


@dataclass(frozen=True)
class RunClosed:
    pass


@dataclass(frozen=True)
class Checked:
    """A check we ran of a trainer's step: passed, or failed with the report's reason."""

    epoch: int
    step: int
    trainer: int
    passed: bool
    reason: str  # one line
    failure: str = ""  # the CheckFailure name a failed check reports ("" when it could not be run)
    dispute: bool = False  # a dispute's replay: its verdict is reported either way


@dataclass(frozen=True)
class TimerFired:
    pass


Event = (ChainUpdate | PeerReady | PeerResult | ResultHeld | ResultFailed | ListHeld | EpochPrepared | Trained
         | TrainFailed | Applied | ApplyFailed | Saved | TxDone | RecordsRead | Checked | StopRequested | RunClosed
         | TimerFired)  # fmt: skip


# -- actions: what the loop carries out -------------------------------------------------------------------


@dataclass(frozen=True)
class Join:
    throughput: int = (
        0  # tokens/s we train at, as measured (0 = not measured yet: the chain counts the median)
    )


@dataclass(frozen=True)
class PrepareEpoch:
    epoch: int
    load: str  # "keep" (our weights are the epoch's), "start" (a new run's first weights), "checkpoint"


@dataclass(frozen=True)
class AnnounceReady:
    epoch: int


@dataclass(frozen=True)
class WarmupWitness:
    index: int


@dataclass(frozen=True)
class Train:
    epoch: int
    step: int
    batch: tuple[int, int]


@dataclass(frozen=True)
class Publish:
    step: int
    batch: tuple[int, int]
    commitment: bytes
    size: int


@dataclass(frozen=True)
class Fetch:
    step: int
    sender: int
    commitment: bytes
    batch: tuple[int, int] | None  # the batch the chain gave the trainer (its payload must say so)
    # its trainer is asked last, not first: the seats that decided it hold it, or another trainer announced the
    # same commitment (a copier must not hold up the fetch of what it copied)
    decided: bool = False


@dataclass(frozen=True)
class FetchList:
    step: int
    root: bytes
    holders: tuple[int, ...]  # the seats whose record holds this root: they serve it
    clients: int  # the epoch's client count (entries index it)


@dataclass(frozen=True)
class ServeList:
    """Serve a decided results list we built from the results we hold (under its root, as seats serve
    theirs and replicas the lists they fetched): every holder of a decided list answers for it."""

    results: ResultsList


@dataclass(frozen=True)
class Apply:
    epoch: int
    step: int
    commitments: tuple[bytes, ...]


@dataclass(frozen=True)
class SubmitWitness:
    step: int
    index: int
    position: int
    results: ResultsList
    weights_digest: int


@dataclass(frozen=True)
class ReadRecords:
    step: int  # the round whose witness records to read (the read finds its slot in the newest Run)


@dataclass(frozen=True)
class HealthCheck:
    step: int  # the step whose trainers are reported: the records of the round after it decide
    indices: tuple[int, ...]


@dataclass(frozen=True)
class ReportEquivocation:
    index: int
    first: Result
    second: Result


@dataclass(frozen=True)
class Check:
    """Replay `trainer`'s result of `step` (commitment `commitment`) from the states it committed in it and
    in its result of step - 1 (`previous`): the chain's seed made us one of its verifiers."""

    epoch: int
    step: int
    trainer: int
    commitment: bytes
    previous: bytes
    seed: int  # the chain's check seed of `step`: it also draws the bands the check compares
    # we are on the committee of the dispute a failed check opened: the same replay
    dispute: bool = False


@dataclass(frozen=True)
class ReportCheck:
    step: int
    trainer: int
    failure: str  # a CheckFailure name


@dataclass(frozen=True)
class Tick:
    nonce: int


@dataclass(frozen=True)
class SaveCheckpoint:
    epoch: int
    step: int


@dataclass(frozen=True)
class VoteWeights:
    index: int
    step: int
    manifest: bytes


@dataclass(frozen=True)
class LeaveEpoch:
    epoch: int | None
    reason: str


@dataclass(frozen=True)
class Allow:
    members: tuple[int, ...]  # epoch indices of healthy members: the allowlist and gossip overlay
    overlay_key: (
        bytes | None
    )  # the epoch's first round seed once it exists (unknown when members joined)


@dataclass(frozen=True)
class Emit:
    event: str
    fields: dict


@dataclass(frozen=True)
class Finish:
    code: ExitCode
    reason: str = ""


Action = (Join | PrepareEpoch | AnnounceReady | WarmupWitness | Train | Publish | Fetch | FetchList | ServeList
          | Apply | SubmitWitness | ReadRecords | HealthCheck | ReportEquivocation | Check | ReportCheck | Tick
          | SaveCheckpoint | VoteWeights | LeaveEpoch | Allow | Emit | Finish)  # fmt: skip


# -- per-step bookkeeping -----------------------------------------------------------------------------------


@dataclass
class StepBook:
    """What we know of one step's results."""

    step: int
    announced: dict[int, Result] = field(default_factory=dict)  # the first Result per trainer
    announced_at: dict[int, float] = field(
        default_factory=dict
    )  # trainer -> when its Result reached us
    held: dict[int, bytes] = field(
        default_factory=dict
    )  # trainer -> commitment, payload checked and kept
    # (trainer, commitment) pairs whose payload was invalid for that trainer. Per pair, never per trainer: an
    # equivocator's invalid twin must not stop us taking its valid twin when the seats decided that one
    bad: set[tuple[int, bytes]] = field(default_factory=set)
    equivocated: set[int] = field(default_factory=set)
    retry_at: dict[bytes, float] = field(
        default_factory=dict
    )  # commitment -> when to try fetching again
    attempts: dict[bytes, int] = field(default_factory=dict)  # commitment -> failed fetches so far
    majority_at: float | None = None  # when we first held a majority of the expected results
    late: set[int] = field(
        default_factory=set
    )  # trainers a seat reported late (announced, not served in time)


# -- the machine --------------------------------------------------------------------------------------------


class ClientMachine:
    """One client's decisions. `handle(event, now, chain_now)` returns the actions to carry out; `now` is the
    client's monotonic clock, `chain_now` its estimate of the chain's unix time (for due ticks)."""

    def __init__(self, core: CoordinatorCore, wallet: object, timing: Timing | None = None,
                 on_tick_prediction: Callable[[bytes], None] | None = None) -> None:  # fmt: skip
        self.core, self.wallet, self.timing = core, wallet, timing or Timing()
        self.view: ChainView | None = None
        self.stopping = False
        self.finished = False
        # membership
        self.epoch: int | None = None  # the epoch we are a prepared member of
        self.ended: ChainView | None = (
            None  # our epoch as its Cooldown left it: what a late finish applies
        )
        self.preparing: int | None = None
        self.weights_epoch: int | None = None  # the epoch whose starting weights the model holds
        self.saved_manifest: tuple[int, bytes] | None = (
            None  # (step, manifest) of our last epoch-end save
        )
        self.join_sent_for: int | None = None  # the registry's epoch marker we sent a join for
        self.speeds: list[
            float
        ] = []  # tokens/s of our last trained steps (the throughput a join declares)
        # one epoch's progress
        self.index = -1
        self.start_step = 0
        self.trained = 0  # highest step trained, or passed over
        self.training: int | None = None
        self.applied = 0  # highest step applied
        self.applying: int | None = None
        self.digests: dict[int, int] = {}  # step -> sampled weights digest after applying it
        self.books: dict[int, StepBook] = {}
        self.pending: list[tuple[int, Result]] = []  # results of a round we do not see yet (we lag)
        self.fetching: dict[bytes, int] = {}  # commitment -> trainer, while its fetch runs
        self.lists: dict[bytes, ResultsList] = {}  # results lists we hold, by root
        self.list_wanted: dict[bytes, float] = {}  # root -> when we may ask again
        self.decided_seen: dict[
            int, float
        ] = {}  # step -> when its decision was first seen (fetch deadline)
        self.witnessed: dict[
            int, tuple[bytes, float]
        ] = {}  # round step -> (root we submitted, when)
        self.health_checked: set[int] = set()
        self.records: dict[int, tuple[WitnessRecord, ...]] = {}
        self.records_asked: set[int] = set()
        self.drift_checked: set[int] = set()
        self.applied_lists: dict[
            int, tuple[tuple[int, bytes], ...]
        ] = {}  # step -> the entries we applied
        self.checks_planned: set[int] = set()  # steps whose checks we looked up
        # (step, trainer) of the disputes whose committee we read
        self.disputes_planned: set[tuple[int, int]] = set()
        # step -> the results we held (trainer -> commitment) of a step whose round ended undecided: the
        # state a trainer committed in it is what a check of its next step replays from
        self.undecided_held: dict[int, dict[int, bytes]] = {}
        self.unreported: dict[
            tuple[int, int], str
        ] = {}  # (step, trainer) -> failure, until a report lands
        self.ready: set[int] = set()
        self.ready_at = 0.0
        self.ready_sent = 0
        self.warmup_witnessed = False
        self.saving = False
        self.voted = False
        self.members_nonce: tuple[int, bytes | None] | None = None
        # transactions and timers
        self.inflight: set[str] = set()
        self.retry_after: dict[str, float] = {}
        self.tick_plan: tuple[int, float] | None = None  # (nonce, when we send it)

    # -- the entry point -----------------------------------------------------------------------------
    def handle(self, event: Event, now: float, chain_now: float) -> list[Action]:
        out: list[Action] = []
        match event:
            case ChainUpdate(view):
                self.view = view
                ended = view if view.run.state == RunState.Cooldown else view.ended
                if ended is not None and ended.run.progress.epoch == self.epoch:
                    self.ended = ended
                pending, self.pending = self.pending, []
                for sender, result in pending:
                    out += self._on_result(sender, result, now)
            case PeerReady(sender, epoch):
                if self.view is not None and epoch == self.view.run.progress.epoch:
                    self.ready.add(sender)
            case PeerResult(sender, result):
                out += self._on_result(sender, result, now)
            case ResultHeld(step, sender, commitment):
                self.fetching.pop(commitment, None)
                book = self._book(step) if step > self.applied else None
                if book is not None and (sender, commitment) not in book.bad:
                    out += self._on_held(book, sender, commitment)
            case ResultFailed(step, sender, commitment, bad, reason):
                self.fetching.pop(commitment, None)
                out += self._on_fetch_failed(step, sender, commitment, bad, reason, now)
            case ListHeld(step, root, results):
                if results is not None:
                    self.lists[root] = results
                else:
                    self.list_wanted[root] = now + self.timing.fetch_retry
            case EpochPrepared():
                out += self._on_prepared(event)
            case Trained():
                out += self._on_trained(event)
            case TrainFailed(epoch, step, reason):
                if epoch == self.epoch and step == self.training:
                    self.training = None
                    self.trained = step  # this step's result is lost; the pipeline goes on
                    out.append(Emit("train_failed", {"step": step, "reason": reason}))
            case Applied(epoch, step, results, digest):
                if epoch == self.epoch and step == self.applying:
                    self.applying = None
                    self.applied = step
                    self.digests[step] = digest
                    out.append(Emit("applied", {"step": step, "results": results, "decided": True}))
            case ApplyFailed(epoch, step, reason):
                if epoch == self.epoch and step == self.applying:
                    self.applying = None
                    out += self._leave(f"applying step {step} failed: {reason}"[:300])
            case Saved(epoch, step, manifest, digest):
                out += self._on_saved(epoch, step, manifest, digest)
            case TxDone():
                out += self._on_tx(event, now)
            case RecordsRead(step, records):
                self.records[step] = records
            case Checked():
                out += self._on_checked(event)
            case StopRequested():
                self.stopping = True
            case RunClosed():
                self.finished = True
                return [Emit("run_closed", {}), Finish(ExitCode.OK, "the run was closed")]
            case TimerFired():
                pass
        return out + self._plan(now, chain_now)

    # -- event handlers ------------------------------------------------------------------------------
    def _on_result(self, sender: int, result: Result, now: float) -> list[Action]:
        """A trainer's announced result: kept only for a live step, the batch the chain gave it, and the
        first commitment (a second, different one is an equivocation: reported, and the trainer excluded)."""
        view = self.view
        if view is None or self.epoch is None:
            return []
        newest = view.newest if view.newest is not None else self.start_step - 1
        if result.step <= self.applied:
            return []  # a late copy (gossip repair) of a step we are past
        if result.step > newest + 2:
            return [Emit("bad_message", {"sender": sender, "error": f"result of step {result.step} is outside "
                                                                    f"the live window"})]  # fmt: skip
        round_ = view.rounds.get(result.step)
        if round_ is None:  # a round we do not see yet: a peer is ahead of our view of the chain
            if sum(1 for s, _ in self.pending if s == sender) < 2:
                self.pending.append((sender, result))
            return []
        if round_.assignment.get(sender) != result.batch:
            return [
                Emit(
                    "bad_message",
                    {"sender": sender, "error": "result for a batch it was not given"},
                )
            ]
        book = self._book(result.step)
        first = book.announced.get(sender)
        if first is None:
            book.announced[sender] = result
            book.announced_at[sender] = now
            # The same commitment from two trainers: a payload names its batch, so at most one of them is its
            # author, and the fetch (which checks the batch even for bytes we hold) tells which. Neither is
            # refused for the order it arrived in: a copier closer to us must not make the original lose.
            twins = sorted(
                i
                for i, r in book.announced.items()
                if r.commitment == result.commitment and i != sender
            )
            if twins:
                return [
                    Emit(
                        "duplicate_commitment", {"step": result.step, "trainers": [*twins, sender]}
                    )
                ]
            return []
        if first.commitment == result.commitment or sender in book.equivocated:
            return []
        book.equivocated.add(sender)  # a replica never applies an equivocator's result of this step
        return [ReportEquivocation(sender, first, result),
                Emit("equivocation", {"sender": sender, "step": result.step})]  # fmt: skip

    def _on_held(self, book: StepBook, sender: int, commitment: bytes) -> list[Action]:
        book.held[sender] = commitment
        book.retry_at.pop(commitment, None)
        twins = sorted(i for i, c in book.held.items() if c == commitment and i != sender)
        if twins:  # a fetch that could not check the batch (a decided entry): _attestable vouches for neither
            return [
                Emit(
                    "duplicate_commitment",
                    {"step": book.step, "trainers": [*twins, sender], "held": True},
                )
            ]
        return []

    def _on_fetch_failed(self, step: int, sender: int, commitment: bytes, bad: bool, reason: str,
                         now: float) -> list[Action]:  # fmt: skip
        book = self.books.get(step)
        if book is None:
            return []
        if bad:  # invalid for this trainer (a decided list that needs it makes _apply leave)
            book.bad.add((sender, commitment))
            if book.held.get(sender) == commitment:
                del book.held[sender]
            return [Emit("bad_result", {"step": step, "sender": sender, "error": reason[:200]})]
        # not had yet (its holders busy, or not holding it yet): again soon, then less and less often
        tries = book.attempts[commitment] = book.attempts.get(commitment, 0) + 1
        book.retry_at[commitment] = now + min(self.timing.fetch_retry, 0.05 * 2 ** (tries - 1))
        if tries < 4:
            return []
        return [Emit("fetch_retry", {"step": step, "sender": sender, "error": reason[:200]})]

    def _on_prepared(self, event: EpochPrepared) -> list[Action]:
        view = self.view
        if event.epoch != self.preparing:
            return []
        self.preparing = None
        if not event.ok:
            self._send("leave")
            return [Emit("no_weights", {"epoch": event.epoch, "reason": event.reason[:300]}),
                    LeaveEpoch(event.epoch, "no weights for this epoch")]  # fmt: skip
        if view is None or view.me is None:
            return []
        self._reset_epoch()
        self.epoch = self.weights_epoch = event.epoch
        self.index = view.me.index
        self.start_step = view.run.progress.step
        self.trained = self.applied = self.start_step - 1
        self.digests[self.start_step - 1] = event.digest
        return [Emit("epoch_started", {"epoch": event.epoch, "step": self.start_step,
                                       "clients": len(view.run.clients)})]  # fmt: skip

    def _on_trained(self, event: Trained) -> list[Action]:
        if event.epoch != self.epoch or event.step != self.training:
            return []
        self.training = None
        self.trained = event.step
        self._book(event.step).held[self.index] = event.commitment
        self.speeds = [*self.speeds[-(SPEED_WINDOW - 1) :], event.tokens / max(event.seconds, 1e-9)]
        return [Publish(event.step, event.batch, event.commitment, event.size),
                Emit("trained", {"step": event.step, "loss": round(event.loss, 5), "tokens": event.tokens,
                                 "seconds": round(event.seconds, 3),
                                 "tokens_per_sec": round(event.tokens / max(event.seconds, 1e-9), 1),
                                 "batch": list(event.batch), "bytes": event.size})]  # fmt: skip

    def _on_saved(self, epoch: int, step: int, manifest: bytes, digest: str) -> list[Action]:
        self.saving = False
        if epoch != self.epoch:
            return []
        self.saved_manifest = (step, manifest)
        self.weights_epoch = epoch + 1
        self.epoch = None
        return [Emit("epoch_end", {"epoch": epoch, "step": step, "applied": self.applied, "digest": digest}),
                Emit("checkpoint_saved", {"epoch": epoch, "step": step, "manifest": manifest.hex()})]  # fmt: skip

    def _on_tx(self, event: TxDone, now: float) -> list[Action]:
        self.inflight.discard(event.kind)
        out: list[Action] = []
        if event.kind == "leave":
            return out
        if event.ok and event.kind == "report_check":
            self.unreported.pop(divmod(event.key, 1 << 16), None)
        if event.ok:
            names = {"witness": "witnessed", "warmup_witness": "warmup_witnessed", "tick": "ticked",
                     "health_check": "health_check", "vote_weights": "weights_voted", "join": "joined",
                     "report_equivocation": "equivocation_reported", "report_check": "check_reported"}  # fmt: skip
            out.append(Emit(names.get(event.kind, event.kind), {"key": event.key}))
            if event.kind == "vote_weights":
                self.voted = True
            return out
        if event.kind == "join" and event.error in REFUSALS:
            return [Finish(REFUSALS[event.error], f"cannot join: {event.error}")]
        if event.kind == "join" and event.error == "InsufficientFunds":
            return [Finish(ExitCode.UNFUNDED, "the wallet cannot pay for its join")]
        if event.kind == "join":
            self.join_sent_for = None  # try again
        if event.kind == "witness":
            self.witnessed.pop(event.key, None)  # nothing was recorded: may submit again
        if event.kind == "report_check" and event.error not in ("rpc", "DisputesFull"):
            self.unreported.pop(
                divmod(event.key, 1 << 16), None
            )  # refused: sending it again changes nothing
        if event.kind == "vote_weights" and event.error == "NoChange":
            self.voted = True
        if event.kind == "warmup_witness" and event.error not in LOST_RACE:
            self.warmup_witnessed = False
        self.retry_after[event.kind] = now + (
            self.timing.tick_retry if event.kind == "tick" else self.timing.tx_retry
        )
        if event.error not in LOST_RACE:
            out.append(Emit("tx_refused" if event.error != "rpc" else "tx_failed",
                            {"what": event.kind, "error": event.error}))  # fmt: skip
        return out

    # -- planning ------------------------------------------------------------------------------------
    def _plan(self, now: float, chain_now: float) -> list[Action]:
        view = self.view
        if view is None or self.finished:
            return []
        run = view.run
        if self.stopping:
            return self._stop()
        out = self._tick(now, chain_now)
        if run.state == RunState.WaitingForMembers:
            out += self._waiting(now)
        elif run.state == RunState.Warmup:
            out += self._warmup(now)
        elif run.state in ROUND_PHASES:
            out += self._rounds(now)
        elif run.state == RunState.Cooldown:
            out += self._cooldown(now)
        elif run.state == RunState.Finished:
            self.finished = True
            out.append(Emit("run_finished", {"step": run.progress.step}))
            out.append(Finish(ExitCode.OK))
        elif run.state == RunState.Paused and self.epoch is not None:
            out += self._leave("the run was paused")
        return out

    def _stop(self) -> list[Action]:
        """Leave after what is in flight: our training or apply finishes, then exit_run, then exit."""
        if self.training is not None or self.applying is not None or self.saving or self.finished:
            return []
        self.finished = True
        return [LeaveEpoch(self.epoch, "stopping"), Finish(ExitCode.OK)]

    def _allowed(self, action: str, now: float) -> bool:
        return action not in self.inflight and now >= self.retry_after.get(action, 0.0)

    def _send(self, action: str) -> None:
        self.inflight.add(action)

    def _tick(self, now: float, chain_now: float) -> list[Action]:
        """When the chain's own code says a tick would change the phase now, wait our turn, then tick."""
        run = self.view.run  # type: ignore[union-attr]
        if run.state.halted:
            return []
        due = (
            self.core.tick(bytearray(run.data[8:]), Env(int(chain_now), bytes(32), run.address))
            == 0
        )
        if not due:
            self.tick_plan = None
            return []
        if self.tick_plan is None or self.tick_plan[0] != run.nonce:
            position = self.view.me.index if self.view.me is not None else 8  # type: ignore[union-attr]
            self.tick_plan = (run.nonce, now + self.timing.tick_turn * (position % 8))
        if now < self.tick_plan[1] or not self._allowed("tick", now):
            return []
        self._send("tick")
        self.tick_plan = (run.nonce, now + self.timing.tick_retry)
        return [Tick(run.nonce)]

    def _waiting(self, now: float) -> list[Action]:
        """Between epochs: vote our checkpoint's hash if we finished the last one, join the next."""
        view = self.view
        assert view is not None
        run, out = view.run, []
        if self.epoch is not None:  # the epoch ended while we were still in it
            out += self._finish_late(now)
        out += self._vote(now)
        entry = next((e for e in run.registry if e.signer == self.wallet), None)
        marker = run.progress.epoch
        if (entry is None or not entry.pending) and self.join_sent_for != marker and self._allowed("join", now) \
                and "leave" not in self.inflight:  # our exit_run lands first, else it would undo the join  # fmt: skip
            self.join_sent_for = marker
            self._send("join")
            out.append(Join(self.throughput()))
        return out

    def _finish_late(self, now: float) -> list[Action]:
        """The chain's Cooldown ended before we applied the epoch's last steps (a far or slow client): what
        it decided is final, so finish from the epoch as its Cooldown left it (apply, save, then vote while
        votes are taken) rather than drop the epoch. Given up, without exit_run (our next join may have
        landed), when we saw neither its Cooldown nor the WaitingForMembers after it (the next Warmup clears
        its rounds), or the decided results cannot be had within the fetch deadline."""
        live, ended = self.view, self.ended
        if ended is None or ended.run.progress.epoch != self.epoch:
            out: list[Action] = [
                Emit(
                    "left_epoch",
                    {"epoch": self.epoch, "reason": "the epoch ended before our Cooldown"},
                )
            ]
            self._forget_epoch()
            return out
        self.view = ended
        try:
            out = self._cooldown(now)
        finally:
            self.view = live
        if any(isinstance(a, LeaveEpoch) for a in out):
            self.inflight.discard("leave")
            out = [a for a in out if not isinstance(a, LeaveEpoch)]
        return out

    def _forget_epoch(self) -> None:
        self._reset_epoch()
        self.epoch = None
        self.weights_epoch = None

    def throughput(self) -> int:
        """The median tokens/s of our last trained steps (0 before any): what a join declares, so the chain
        sizes our share of the next epoch's batches to what this machine trains."""
        if not self.speeds:
            return 0
        return int(sorted(self.speeds)[len(self.speeds) // 2])

    def _vote(self, now: float) -> list[Action]:
        view = self.view
        assert view is not None
        run, me = view.run, view.me
        if self.voted or self.saved_manifest is None or me is None or not me.healthy:
            return []
        step, manifest = self.saved_manifest
        if step != run.progress.step or not self._allowed("vote_weights", now):
            return []
        self._send("vote_weights")
        return [VoteWeights(me.index, step, manifest)]

    def _warmup(self, now: float) -> list[Action]:
        """Load this epoch's weights and peers, say Ready on a fixed timer, and once every member is ready
        send the warmup witness, so the first round starts as soon as all are, not at the timeout."""
        view = self.view
        assert view is not None
        run, me, out = view.run, view.me, []
        epoch = run.progress.epoch
        if (
            self.epoch is not None and self.epoch != epoch
        ):  # the last epoch first (its save decides our plan)
            return self._finish_late(now)
        if me is None or not me.healthy:
            return out
        if self.epoch != epoch:
            if self.preparing != epoch:
                self._reset_epoch()
                self.preparing = epoch
                self.voted = False
                out.append(PrepareEpoch(epoch, self._load_plan()))
            return out
        out += self._allow()
        if now >= self.ready_at:
            t = self.timing
            self.ready_at = now + min(t.ready_every * 2**self.ready_sent, t.ready_every_max)
            self.ready_sent += 1
            out.append(AnnounceReady(epoch))
        self.ready.add(me.index)
        healthy = {c.index for c in run.clients if c.healthy}
        if healthy <= self.ready and not self.warmup_witnessed and not run.seed_pending and \
                self._allowed("warmup_witness", now):  # fmt: skip
            self.warmup_witnessed = True
            self._send("warmup_witness")
            out.append(WarmupWitness(me.index))
        return out

    def _load_plan(self) -> str:
        """Which weights this epoch starts from: ours when we hold the last epoch's end and it is the one a
        majority voted (or none was voted yet); else the checkpoint the chain points at (drift repair
        follows the majority, never one outlier); a new run's first epoch starts from its own seed."""
        run = self.view.run  # type: ignore[union-attr]
        pointer = run.model.checkpoint
        if self.weights_epoch == run.progress.epoch and self.saved_manifest is not None:
            step, manifest = self.saved_manifest
            voted = pointer.step == step and pointer.weights_sha256 != bytes(32)
            return "checkpoint" if voted and pointer.weights_sha256 != manifest else "keep"
        if self.weights_epoch == run.progress.epoch:
            return "keep"
        if run.progress.epoch == 0 and run.progress.step == 1:
            return "start"
        return "checkpoint"

    def _allow(self) -> list[Action]:
        """Follow drops and exits within a round, and key the overlay by the first round's seed."""
        view = self.view
        assert view is not None
        first = view.rounds.get(self.start_step)
        key = first.seed.to_bytes(8, "little") if first is not None and first.stored else None
        if (view.run.members_nonce, key) == self.members_nonce:
            return []
        self.members_nonce = (view.run.members_nonce, key)
        return [Allow(tuple(c.index for c in view.run.clients if c.healthy), key)]

    def _rounds(self, now: float) -> list[Action]:
        view = self.view
        assert view is not None
        run = view.run
        if self.epoch != run.progress.epoch:
            return []
        if view.me is None or not view.me.healthy:
            return self._leave("we are no longer a healthy member of the epoch")
        out = self._allow()
        out += self._drift()
        if any(isinstance(a, LeaveEpoch) for a in out):
            return out
        out += self._apply(now)
        if any(isinstance(a, LeaveEpoch) for a in out):
            return out
        out += self._train()
        out += self._apply(now)  # an apply that waited for the step _train just sent
        out += self._fetches(now)
        out += self._witness(now)
        out += self._health(now)
        out += self._checks()
        out += self._reports(now)
        return out

    def _cooldown(self, now: float) -> list[Action]:
        """The epoch is over: apply everything that was decided, then write the checkpoint (its hash is
        voted from here until the next epoch starts)."""
        view = self.view
        assert view is not None
        if self.epoch != view.run.progress.epoch:
            return self._vote(now)
        out = self._drift()
        if out:
            return out
        out += self._apply(now)
        if any(isinstance(a, LeaveEpoch) for a in out):
            return out
        out += self._fetches(now)
        out += self._checks() + self._reports(now)  # the epoch's last checks are still due
        done = view.newest is not None and self.applied >= view.newest
        if done and not self.saving and self.applying is None and self.training is None:
            self.saving = True
            out.append(SaveCheckpoint(self.epoch, view.run.progress.step))
        return out

    # -- the pipeline --------------------------------------------------------------------------------
    def _apply(self, now: float) -> list[Action]:
        """Apply the next step once the chain decided it, with exactly the decided results."""
        view = self.view
        assert view is not None
        out: list[Action] = []
        while self.applying is None and view.newest is not None and self.applied < view.newest:
            step = self.applied + 1
            try:
                decided = decision(view, step)
            except LookupError as e:
                return out + self._leave(str(e))
            if decided is None:
                return out
            if decided.root is None:  # nothing to apply, the same on every replica
                book = self.books.get(step)
                self.undecided_held[step] = dict(book.held) if book is not None else {}
                for old in sorted(self.undecided_held)[:-CHECKED_STEPS]:
                    del self.undecided_held[old]
                self.applied = step
                self.digests[step] = self.digests.get(step - 1, 0)
                out.append(Emit("applied", {"step": step, "results": 0, "decided": False}))
                continue
            first_seen = self.decided_seen.setdefault(step, now)
            results = self._decided_list(step, decided.root, out)
            if (
                results is not None and not results.entries
            ):  # decided: nobody's result (nothing to apply)
                self.applied = step
                self.digests[step] = self.digests.get(step - 1, 0)
                out.append(Emit("applied", {"step": step, "results": 0, "decided": True}))
                continue
            if results is None:
                out += self._ask_list(step, decided.root, now)
            else:
                book = self._book(step)
                # An apply needs each decided result's bytes once, whoever's entry brings them: a list that
                # names one commitment twice (a copy that slipped past its seats) applies it once, everywhere
                missing: dict[bytes, list[int]] = {}
                have = set(book.held.values())
                for i, c in results.entries:
                    if c not in have:
                        missing.setdefault(c, []).append(i)
                if not missing and self._trains_next_on_older_weights(step):
                    return (
                        out  # step + 1 trains on the weights before this step: its job goes first
                    )
                if not missing:
                    self.applied_lists[step] = tuple(results.entries)
                    for old in sorted(self.applied_lists)[:-CHECKED_STEPS]:
                        del self.applied_lists[old]
                    self.applying = step
                    out.append(Apply(self.epoch, step, results.commitments))  # type: ignore[arg-type]
                    return out
                given = view.rounds[step].assignment if step in view.rounds else {}
                for c, trainers in missing.items():
                    valid = [i for i in trainers if (i, c) not in book.bad]
                    if not valid:  # the majority attested a payload that is not valid here
                        return out + self._leave(
                            f"the result of trainer {trainers[0]} decided for step {step} is invalid"
                        )
                    if self._may_fetch(step, valid[0], c, now):
                        out.append(Fetch(step, valid[0], c, given.get(valid[0]), decided=True))
            if now - first_seen > Timing.fetch_deadline(view.run.config.max_round_train_time):
                return out + self._leave(
                    f"the results decided for step {step} could not be had in time"
                )
            return out
        return out

    # -- verification ---------------------------------------------------------------------------------
    def _checks(self) -> list[Action]:
        """The checks the chain's seed gives us: for each step we applied, once the seed that draws its
        checks is out (the round's CHECK_SEED_LAG after it: revealed only after the step was decided, so no
        trainer knows when it sends a result whether it will be checked), every trainer whose results of
        that step and of the one before we applied is checked with the run's probability, by verifiers the
        same seed draws; if we are one of them, we replay it."""
        view = self.view
        assert view is not None
        if self.epoch is None or not view.run.config.verification_percent:
            return []
        out: list[Action] = []
        for step in sorted(self.applied_lists):
            seed = view.run.check_seed(step)
            if step in self.checks_planned or seed is None:
                continue
            self.checks_planned.add(step)
            previous = self._committed_before(step)
            for trainer, commitment in self.applied_lists[step]:
                if trainer == self.index or trainer not in previous:
                    continue  # its first step of the epoch: its earlier state was never committed to us
                if self.index in self.core.check_plan(view.run.data[8:], step, seed, trainer):
                    out.append(
                        Check(self.epoch, step, trainer, commitment, previous[trainer], seed)
                    )
        return out + self._dispute_checks()

    def _committed_before(self, step: int) -> dict[int, bytes]:
        """trainer -> its result of step - 1 we hold: the decided one, or, when that step's round ended
        undecided, the one we held then (its committed state is still what its step `step` started from)."""
        if step - 1 in self.applied_lists:
            return dict(self.applied_lists[step - 1])
        return dict(self.undecided_held.get(step - 1, {}))

    def _dispute_checks(self) -> list[Action]:
        """A failed check opened a dispute: once the seed that draws its committee is out, a member of the
        committee runs the same check (same step, same states, same sampled bands: the check's seed) and
        reports its verdict, Passed included."""
        view = self.view
        assert view is not None and self.epoch is not None
        out: list[Action] = []
        for step, trainer, _ in view.run.disputes:
            if (step, trainer) in self.disputes_planned or trainer == self.index:
                continue
            committee = self.core.dispute_committee(view.run.data[8:], step, trainer)
            if not committee:
                continue  # closed, or its committee's seed is not out yet
            self.disputes_planned.add((step, trainer))
            if self.index not in committee:
                continue
            entries, previous = dict(self.applied_lists.get(step, ())), self._committed_before(step)
            seed = view.run.check_seed(step)
            if trainer not in entries or trainer not in previous or seed is None:
                out.append(Emit("check_skipped", {"step": step, "trainer": trainer, "dispute": True,
                                                  "reason": "we no longer hold its results"}))  # fmt: skip
                continue
            out.append(
                Check(
                    self.epoch,
                    step,
                    trainer,
                    entries[trainer],
                    previous[trainer],
                    seed,
                    dispute=True,
                )
            )
        return out

    def _on_checked(self, event: Checked) -> list[Action]:
        if event.epoch != self.epoch:
            return []
        fields = {"step": event.step, "trainer": event.trainer, "reason": event.reason[:200]}
        if event.dispute:
            fields["dispute"] = True
        if event.passed:
            if (
                event.dispute
            ):  # a dispute's committee reports Passed too: a majority of it refutes the check
                self.unreported[(event.step, event.trainer)] = "Passed"
            return [Emit("checked", fields)]
        if not event.failure:  # we could not run it (we lack the weights): no evidence either way
            return [Emit("check_skipped", fields)]
        self.unreported[(event.step, event.trainer)] = event.failure
        return [Emit("check_failed", {**fields, "failure": event.failure})]

    def _reports(self, now: float) -> list[Action]:
        """One report of a failed check at a time; one the RPC lost goes again after the retry time."""
        if not self.unreported or not self._allowed("report_check", now):
            return []
        (step, trainer), failure = next(iter(self.unreported.items()))
        self._send("report_check")
        return [ReportCheck(step, trainer, failure)]

    @property
    def depth(self) -> int:
        """The run's pipeline depth d: step s trains on exactly the weights after step s - d (every replica
        the same, so a verifier can replay it from its own copy). A deeper pipeline keeps more steps in
        flight while results travel and the chain decides, at the cost of staler gradients."""
        return (
            self.view.run.config.pipeline_depth
            if self.view is not None
            else RunConfig.pipeline_depth
        )

    def _trains_next_on_older_weights(self, step: int) -> bool:
        """Whether applying `step` now would change the weights a later step is still to be trained on.
        Steps up to step + d - 1 train on the weights before it, never on fresher ones: a replica whose
        training lags applies it only after step + d - 1 went to the worker, or once it will not train that
        step (passed over, or the epoch's end)."""
        view = self.view
        assert view is not None
        later = step + self.depth - 1  # the last step that trains on the weights before this one
        if view.run.state not in ROUND_PHASES or self.training == later or self.trained >= later:
            return False
        last = view.run.last_step
        return not (last and later >= last)

    def _decided_list(self, step: int, root: bytes, out: list[Action]) -> ResultsList | None:
        """The decided list, if we hold it: submitted as a seat, fetched, or the list of the results we hold.
        The last we then serve too (ServeList): replicas ask every member for a decided list, so whoever
        holds one answers for it, not only the seats and the replicas that fetched it."""
        if root in self.lists:
            return self.lists[root]
        book = self.books.get(step)
        mine = ResultsList.of(step, book.held if book else {})
        if mine.root != root:
            return None
        self.lists[root] = mine
        out.append(ServeList(mine))
        return mine

    def _ask_list(self, step: int, root: bytes, now: float) -> list[Action]:
        if now < self.list_wanted.get(root, 0.0):
            return []
        self.list_wanted[root] = now + 3600.0  # until ListHeld says otherwise
        attesting = self.view.rounds.get(step + 1)  # type: ignore[union-attr]
        holders = (
            tuple(r.index for r in (attesting.records or ()) if r.results_root == root)
            if attesting
            else ()
        )
        return [FetchList(step, root, holders, len(self.view.run.clients))]  # type: ignore[union-attr]

    def _may_fetch(self, step: int, sender: int, commitment: bytes, now: float) -> bool:
        """One fetch per commitment at a time, and per trainer: a member cannot take many fetch slots."""
        if commitment in self.fetching or sender in self.fetching.values():
            return False
        if now < self._book(step).retry_at.get(commitment, 0.0):
            return False
        self.fetching[commitment] = sender
        return True

    def _train(self) -> list[Action]:
        """Train the next step once its batch is known, the one before is trained and t - depth applied."""
        view = self.view
        assert view is not None
        out: list[Action] = []
        while self.training is None and view.run.state in ROUND_PHASES:
            step = self.trained + 1
            round_ = view.rounds.get(step)
            if round_ is None or (view.run.last_step and step >= view.run.last_step):
                return out  # not known yet, or past the epoch's last round
            try:
                late = (
                    decision(view, step) is not None
                )  # its results were decided already: too late
            except LookupError:
                late = True
            batch = round_.assignment.get(self.index)
            if late or not trains(view.run, step) or batch is None or not round_.active(self.index):
                self.trained = step
                if not trains(view.run, step):
                    out.append(Emit("flush_round", {"step": step}))
                continue
            if step - self.depth > self.applied:
                return out
            self.training = step
            out.append(Train(self.epoch, step, batch))  # type: ignore[arg-type]
        return out

    def _fetches(self, now: float) -> list[Action]:
        """Fetch every announced result of a live step from a trainer that was given that batch, one fetch
        per trainer at a time."""
        view = self.view
        assert view is not None
        out: list[Action] = []
        for step in sorted(self.books):
            book = self.books[step]
            if step <= self.applied:
                continue
            for sender, result in book.announced.items():
                if (
                    sender in book.held
                    or (sender, result.commitment) in book.bad
                    or sender in book.equivocated
                ):
                    continue
                if view.healthy(sender) and self._may_fetch(step, sender, result.commitment, now):
                    # announced by another trainer too: whichever copied it is not asked first for it
                    shared = (
                        sum(r.commitment == result.commitment for r in book.announced.values()) > 1
                    )
                    out.append(Fetch(step, sender, result.commitment, result.batch, decided=shared))
        return out

    def _attestable(self, step: int) -> dict[int, bytes]:
        """The results of `step` a witness vouches for: held, checked, of trainers given that batch, never one
        commitment twice (then neither: a list holds each result once, and which trainer is its author
        cannot be told apart, so no order of arrival decides it), never a convicted trainer's (a seat that
        held one statement of a twin when another member's report convicted it never gets the second: gossip
        from a member no longer healthy is dropped; it leaves the twin out as the seats that saw both do)."""
        book = self.books.get(step)
        if book is None:
            return {}
        counts = Counter(book.held.values())
        clients = self.view.run.clients if self.view is not None else ()
        convicted = {c.index for c in clients if c.state == "Convicted"}
        return {i: c for i, c in book.held.items() if i not in book.equivocated and i not in convicted
                and (i, c) not in book.bad and counts[c] == 1}  # fmt: skip

    def _witness(self, now: float) -> list[Action]:
        """A seat submits its record of the previous step's results: once all expected are in hand, or a
        bounded grace after a strict majority arrived (longer while a missing one was announced: its fetch is
        under way), or when the round's training time is up; and replaces it while the round is undecided
        if it holds something else now."""
        view = self.view
        assert view is not None
        run, current = view.run, view.current
        if (
            current is None
            or not current.stored
            or run.seed_pending
            or current.decided
            or run.state not in ROUND_PHASES
        ):
            return []
        if not self._allowed("witness", now):
            return []
        seat = self.core.witness_seat(run.data[8:], self.index)
        if seat is None:
            return []
        step = current.step - 1
        digest = self.digests.get(max(current.step - self.depth, self.start_step - 1))
        if digest is None:
            return []  # we have not applied the step our weights digest is for yet
        held = self._attestable(step)
        attested = view.rounds.get(step)
        expected = {
            i for i in (attested.assignment if attested is not None else {}) if view.healthy(i)
        }
        book = self._book(step)
        # not waited for: an equivocator, a trainer whose one announced result is invalid for it (a copy of
        # another's, say: it has no other to give without equivocating), one whose result is another's too
        expected -= book.equivocated
        expected -= {i for i, r in book.announced.items() if (i, r.commitment) in book.bad}
        expected -= {i for i in book.held if i not in held}
        results = ResultsList.of(
            step,
            {i: c for i, c in held.items() if attested is not None and i in attested.assignment},
        )
        if book.majority_at is None and 2 * len(expected & set(held)) > len(expected):
            book.majority_at = now
        submitted = self.witnessed.get(current.step)
        if submitted is None:
            waited = False
            if book.majority_at is not None and step > self.start_step:
                waited = now >= self._give_up_at(
                    book, expected - set(held), run.config.max_round_train_time
                )
            if not (expected <= set(held) or waited or run.state == RunState.RoundWitness):
                return []
        elif submitted[0] == results.root or now - submitted[1] < self.timing.resubmit_every:
            return []
        self.witnessed[current.step] = (results.root, now)
        self.lists[results.root] = results
        self._send("witness")
        out: list[Action] = [SubmitWitness(current.step, self.index, seat, results, digest)]
        missing = expected - set(held)
        late = sorted(i for i in missing if i in book.announced and i not in book.late and
                      now >= book.announced_at[i] + self._serve_time(book, i))  # fmt: skip
        for i in late:  # announced, not served in time: what a trainer that serves late is known by
            book.late.add(i)
            out.append(Emit("late_result", {"step": step, "trainer": i,
                                            "announced_ago": round(now - book.announced_at[i], 3)}))  # fmt: skip
        if (
            missing
        ):  # why a seat leaves a healthy trainer out: the first thing to know when one is dropped
            out.append(
                Emit(
                    "witness_short",
                    {
                        "step": step,
                        "missing": {i: self._whereabouts(book, i) for i in sorted(missing)},
                    },
                )
            )
        return out

    def _serve_time(self, book: StepBook, trainer: int) -> float:
        """The time an announced result takes to serve: its size as announced, but never more than the
        largest result of its step we hold (a trainer cannot buy itself time by announcing a large size)."""
        size = book.announced[trainer].size
        sizes = [r.size for i, r in book.announced.items() if i in book.held]
        return self.timing.serve_time(min(size, max(sizes)) if sizes else size)

    def _give_up_at(self, book: StepBook, missing: set[int], max_round_train_time: int) -> float:
        """When a seat holding a majority stops waiting for the `missing` results: a silent trainer may still
        be training, so it gets a grace; an announced result is ready, so it gets its serve time from its
        announcement (at least until the majority is in, at most ANNOUNCED_GRACES graces after it)."""
        assert book.majority_at is not None
        grace = Timing.witness_grace(max_round_train_time)
        at = book.majority_at
        for i in missing:
            if i not in book.announced:
                at = max(at, book.majority_at + grace)
                continue
            served = book.announced_at[i] + self._serve_time(book, i)
            at = max(at, min(book.majority_at + grace * Timing.ANNOUNCED_GRACES, served))
        return at

    def _whereabouts(self, book: StepBook, trainer: int) -> str:
        """What we know of a trainer's result that we do not hold (for witness_short)."""
        result = book.announced.get(trainer)
        if any(t == trainer for t, _ in book.bad):
            return "invalid payload"
        if result is None:
            return "not announced"
        if trainer in book.late:
            return "late"
        if result.commitment in self.fetching:
            return "fetching"
        tries = book.attempts.get(result.commitment, 0)
        return f"announced, {tries} failed fetches" if tries else "announced, not fetched yet"

    def _health(self, now: float) -> list[Action]:
        """If we had a seat in the previous round, report whom its seats left out of the step before (the
        chain's rule: the decided set, else a majority of the seats). The report names that step, so the
        chain reads the same records even when a round started since."""
        view = self.view
        assert view is not None
        current = view.current
        if (
            current is None
            or not current.stored
            or view.run.seed_pending
            or current.step in self.health_checked
        ):
            return []
        previous = current.step - 1
        if previous not in self.witnessed:
            return []
        records = view.rounds[previous].records if previous in view.rounds else None
        if records is None:
            records = self.records.get(previous)
        if records is None:
            if previous in self.records_asked:
                return []
            self.records_asked.add(previous)
            return [ReadRecords(previous)]
        self.health_checked.add(current.step)
        bad = unhealthy(view, previous - 1, records)
        return [HealthCheck(previous - 1, tuple(bad))] if bad else []

    def _drift(self) -> list[Action]:
        """Our weights against what a strict majority of a round's seats reported: leave on mismatch (the
        next epoch starts from the checkpoint the majority voted)."""
        view = self.view
        assert view is not None
        for step, round_ in view.rounds.items():
            if not round_.stored or round_.digest_votes < view.quorum or step in self.drift_checked:
                continue
            mine = self.digests.get(max(step - self.depth, self.start_step - 1))
            if mine is None:
                continue
            self.drift_checked.add(step)
            if mine != round_.weights_digest:
                return [Emit("replica_drift", {"step": step, "ours": mine, "majority": round_.weights_digest}),
                        *self._leave(f"our weights differ from the majority's at round {step}")]  # fmt: skip
        return []

    def _leave(self, reason: str) -> list[Action]:
        """Leave the epoch: exit_run first (the loop sends it), then forget the epoch; our weights are no
        longer the epoch's, so the next epoch starts from its checkpoint."""
        epoch = self.epoch
        if epoch is None:
            return []
        self._forget_epoch()
        self.join_sent_for = None
        self._send("leave")
        return [LeaveEpoch(epoch, reason), Emit("left_epoch", {"epoch": epoch, "reason": reason})]

    # -- bookkeeping ---------------------------------------------------------------------------------
    def _book(self, step: int) -> StepBook:
        book = self.books.get(step)
        if book is None:
            book = self.books[step] = StepBook(step)
            for old in [s for s in self.books if s < self.applied - 2]:
                del self.books[old]
        return book

    def _reset_epoch(self) -> None:
        self.training = self.applying = None
        self.digests.clear()
        self.books.clear()
        self.pending.clear()
        self.fetching.clear()
        self.lists.clear()
        self.list_wanted.clear()
        self.decided_seen.clear()
        self.witnessed.clear()
        self.health_checked.clear()
        self.records.clear()
        self.records_asked.clear()
        self.drift_checked.clear()
        self.applied_lists.clear()
        self.checks_planned.clear()
        self.disputes_planned.clear()
        self.undecided_held.clear()
        self.unreported.clear()
        self.ready.clear()
        self.ready_at = 0.0
        self.ready_sent = 0
        self.warmup_witnessed = False
        self.saving = False
        self.members_nonce = None
        self.ended = None
