"""The rounds: train each step, take in peers' results, apply what the chain decided."""

from __future__ import annotations

from ..messages import Result
from ..results_list import ResultsList
from ..rounds import ROUND_PHASES, decision, trains
from .actions import (
    Action,
    Apply,
    Emit,
    Fetch,
    FetchList,
    Publish,
    ReportEquivocation,
    ServeList,
    Train,
)
from .book import StepBook
from .events import (
    Trained,
)
from .state import MachineState
from .timing import Timing

SPEED_WINDOW = 16  # trained steps whose median tokens/s a join declares
# applied steps whose lists we keep for the checks their seeds may give us, and for the disputes those checks
# may open (the chain keeps a dispute of step s open until the round of s + DISPUTE_HORIZON, 14)
CHECKED_STEPS = 16


class Training(MachineState):
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

    def _on_trained(self, event: Trained) -> list[Action]:
        if event.epoch != self.epoch or event.step != self.training:
            return []
        self.training = None
        self.trained = event.step
        self._book(event.step).held[self.index] = event.commitment
        self.speeds = [*self.speeds[-(SPEED_WINDOW - 1) :], event.tokens / max(event.seconds, 1e-9)]
        return [Publish(event.step, event.batch, event.commitment, event.size),
                Emit("trained", {"step": event.step, "loss": round(event.loss, 5), "tokens": event.tokens,
                                 "seconds": round(event.seconds, 3), "waited": round(event.waited, 3),
                                 "tokens_per_sec": round(event.tokens / max(event.seconds, 1e-9), 1),
                                 "batch": list(event.batch), "bytes": event.size})]  # fmt: skip

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
        book = self._book(step)
        if now < book.retry_at.get(commitment, 0.0):
            return False
        self.fetching[commitment] = sender
        book.asked_at.setdefault(sender, now)
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
