"""Checks: replay the steps the seed draws for us (and disputes' committees), report failures."""

from __future__ import annotations

from .actions import (
    Action,
    Check,
    Emit,
    ReleaseState,
    ReportCheck,
)
from .events import (
    Checked,
)
from .state import MachineState


class Verification(MachineState):
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
                if trainer == self.index:
                    self.own_drawn[step] = bool(
                        self.core.check_plan(view.run.data[8:], step, seed, trainer)
                    )
                    continue
                if trainer not in previous:
                    continue  # its first step of the epoch: its earlier state was never committed to us
                if self.index in self.core.check_plan(view.run.data[8:], step, seed, trainer):
                    out.append(
                        Check(self.epoch, step, trainer, commitment, previous[trainer], seed)
                    )
            self.own_drawn.setdefault(step, False)  # no result of ours applied: nothing to check
            out += self._releases(step)
        return out + self._dispute_checks()

    def _releases(self, step: int) -> list[Action]:
        """Our committed states no check can read any more, once `step`'s seed is out: a check of step s reads
        our states of s - 1 and s, and a dispute replays only a check that was drawn. The rest stay for the
        blob store's rounds (KEPT_STATES), which also covers the steps whose next round was never decided."""
        drawn = self.own_drawn
        out: list[Action] = [
            ReleaseState(s)
            for s in (step - 1, step)
            if s in drawn and s + 1 in drawn and not drawn[s] and not drawn[s + 1]
        ]
        for old in [s for s in drawn if s < step - 1]:  # seeds come in order: these were decided on
            del drawn[old]
        return out

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
        fields = {"step": event.step, "trainer": event.trainer, "reason": event.reason[:200]}
        if event.dispute:
            fields["dispute"] = True
        if event.epoch != self.epoch:  # its epoch ended first: a report could no longer land
            verdict = "passed" if event.passed else (event.failure or "not run")
            return [Emit("check_lapsed", {**fields, "epoch": event.epoch, "verdict": verdict})]
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
