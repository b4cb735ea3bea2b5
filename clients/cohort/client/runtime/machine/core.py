"""The machine itself: one event in, the actions of every phase out."""

from __future__ import annotations

from cohort.sdk.coordinator_core import Env
from cohort.sdk.models import RunState

from ..options import ExitCode
from ..rounds import ROUND_PHASES
from .actions import (
    Action,
    Emit,
    Finish,
    Join,
    LeaveEpoch,
    ReportCheck,
    SubmitWitness,
    Tick,
    VoteWeights,
    WarmupWitness,
    tx_fields,
    tx_name,
)
from .cooldown import Cooldown
from .events import (
    Applied,
    ApplyFailed,
    ChainUpdate,
    Checked,
    EpochPrepared,
    Event,
    ListHeld,
    PeerReady,
    PeerResult,
    RecordsRead,
    ResultFailed,
    ResultHeld,
    RunClosed,
    Saved,
    StopRequested,
    TimerFired,
    Trained,
    TrainFailed,
    TxDone,
)
from .joining import Joining
from .training import Training
from .verification import Verification
from .witnessing import Witnessing

# program errors that only mean another client got there first, or the phase moved on meanwhile
LOST_RACE = frozenset({
    "NothingToTick", "InvalidRunState", "DuplicateWitness", "WitnessesFull", "WrongStep", "InvalidHealthCheck",
    "NotInEpoch", "SeedPending", "RoundOver", "NoChange", "AlreadyJoined", "JoinDuringWarmup", "InvalidWitness",
    "VoteClosed", "DuplicateReport", "CheckExpired",
})  # fmt: skip
REFUSALS = {
    "Halted": ExitCode.RUN_HALTED, "Finished": ExitCode.RUN_HALTED, "JoinNotAuthorized": ExitCode.NOT_AUTHORIZED,
    "RunFull": ExitCode.RUN_FULL, "RegistryFull": ExitCode.RUN_FULL,
    "Banned": ExitCode.NOT_AUTHORIZED,  # convicted in this run: barred for the run's conviction_ban_epochs
}  # fmt: skip


class ClientMachine(Joining, Training, Witnessing, Verification, Cooldown):
    """One client's decisions. `handle(event, now, chain_now)` returns the actions to carry out; `now` is the
    client's monotonic clock, `chain_now` its estimate of the chain's unix time (for due ticks)."""

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

    def _on_tx(self, event: TxDone, now: float) -> list[Action]:
        kind = tx_name(event.action)
        self.inflight.discard(kind)
        out: list[Action] = []
        match event.action:
            case LeaveEpoch():
                return out
            case ReportCheck(step, trainer) if event.ok or event.error not in (
                "rpc",
                "DisputesFull",
            ):
                self.unreported.pop(
                    (step, trainer), None
                )  # landed, or refused: sending it again changes nothing
                if event.error == "CheckExpired":  # the check lapsed before our report landed
                    out.append(Emit("check_lapsed", {"step": step, "trainer": trainer}))
        if event.ok:
            names = {"witness": "witnessed", "warmup_witness": "warmup_witnessed", "tick": "ticked",
                     "health_check": "health_check", "vote_weights": "weights_voted", "join": "joined",
                     "report_equivocation": "equivocation_reported", "report_check": "check_reported"}  # fmt: skip
            out.append(Emit(names[kind], tx_fields(event.action)))
            if isinstance(event.action, VoteWeights):
                self.voted = True
            return out
        match event.action:
            case Join() if event.error in REFUSALS:
                return [Finish(REFUSALS[event.error], f"cannot join: {event.error}")]
            case Join() if event.error == "InsufficientFunds":
                return [Finish(ExitCode.UNFUNDED, "the wallet cannot pay for its join")]
            case Join():
                self.join_sent_for = None  # try again
            case SubmitWitness(step):
                self.witnessed.pop(step, None)  # nothing was recorded: may submit again
            case VoteWeights() if event.error == "NoChange":
                self.voted = True
            case WarmupWitness() if event.error not in LOST_RACE:
                self.warmup_witnessed = False
        self.retry_after[kind] = now + (
            self.timing.tick_retry if kind == "tick" else self.timing.tx_retry
        )
        if event.error not in LOST_RACE:
            out.append(Emit("tx_refused" if event.error != "rpc" else "tx_failed",
                            {"what": kind, "error": event.error}))  # fmt: skip
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

    # -- each run state's plan: the phases that act in it --------------------------------------------
    def _waiting(self, now: float) -> list[Action]:
        """Between epochs: vote our checkpoint's hash if we finished the last one, join the next."""
        view = self.view
        assert view is not None
        out: list[Action] = []
        if self.epoch is not None:  # the epoch ended while we were still in it
            out += self._finish_late(now)
        out += self._vote(now)
        return out + self._join(now)

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
        return out + self._save(self.epoch)

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
