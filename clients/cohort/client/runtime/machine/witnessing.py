"""A seat's part: witness the round's results, health-check whom the seats left out, compare weights."""

from __future__ import annotations

import math
from collections import Counter

from cohort.sdk.models import RunState

from ..results_list import ResultsList
from ..rounds import ROUND_PHASES, unhealthy
from .actions import (
    Action,
    Emit,
    HealthCheck,
    ReadRecords,
    SubmitWitness,
)
from .book import StepBook
from .state import MachineState
from .timing import Timing


class Witnessing(MachineState):
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
                      now >= self._serve_start(book, i) + self._serve_time(book, i))  # fmt: skip
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

    @staticmethod
    def _serve_start(book: StepBook, trainer: int) -> float:
        """When an announced result's serve time starts: when we first asked for it (never before its
        announcement); not yet (inf) while our fetch of the trainer's previous result still runs, which the
        seat's cap of ANNOUNCED_GRACES graces bounds."""
        return book.asked_at.get(trainer, math.inf)

    def _give_up_at(self, book: StepBook, missing: set[int], max_round_train_time: int) -> float:
        """When a seat holding a majority stops waiting for the `missing` results: a silent trainer may still
        be training, so it gets a grace; an announced result is ready, so it gets its serve time from when we
        asked for it (at least until the majority is in, at most ANNOUNCED_GRACES graces after it)."""
        assert book.majority_at is not None
        grace = Timing.witness_grace(max_round_train_time)
        at = book.majority_at
        for i in missing:
            if i not in book.announced:
                at = max(at, book.majority_at + grace)
                continue
            served = self._serve_start(book, i) + self._serve_time(book, i)
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
