"""What the machine remembers (of the run, its epoch and its transactions), and the helpers every phase uses."""

from __future__ import annotations

from collections.abc import Callable

from cohort.sdk.coordinator_core import CoordinatorCore
from cohort.sdk.models import RunConfig, WitnessRecord

from ..messages import Result
from ..results_list import ResultsList
from ..rounds import ChainView
from .actions import (
    Action,
    Emit,
    LeaveEpoch,
)
from .book import StepBook
from .timing import Timing


class MachineState:
    """What the machine remembers: the newest view, its membership, one epoch's progress, its transactions in
    flight; each phase's mixin (joining, training, witnessing, verification, cooldown) reads and updates it."""

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
        # step -> whether its seed drew a check of our result of it (False: not drawn, or we had no result)
        self.own_drawn: dict[int, bool] = {}
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

    def _allowed(self, action: str, now: float) -> bool:
        return action not in self.inflight and now >= self.retry_after.get(action, 0.0)

    def _send(self, action: str) -> None:
        self.inflight.add(action)

    def _forget_epoch(self) -> None:
        self._reset_epoch()
        self.epoch = None
        self.weights_epoch = None

    def _finish_late(self, now: float) -> list[Action]:
        """Finish the last epoch as its Cooldown left it (ClientMachine does: it runs the Cooldown's plan)."""
        raise NotImplementedError

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
        self.own_drawn.clear()
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
