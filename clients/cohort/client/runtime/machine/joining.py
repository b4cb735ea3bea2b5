"""Warmup: joining an epoch, its peers and starting weights, Ready, the warmup witness."""

from __future__ import annotations

from .actions import (
    Action,
    Allow,
    AnnounceReady,
    Emit,
    Join,
    LeaveEpoch,
    PrepareEpoch,
    WarmupWitness,
)
from .events import (
    EpochPrepared,
)
from .state import MachineState


class Joining(MachineState):
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

    def throughput(self) -> int:
        """The median tokens/s of our last trained steps (0 before any): what a join declares, so the chain
        sizes our share of the next epoch's batches to what this machine trains."""
        if not self.speeds:
            return 0
        return int(sorted(self.speeds)[len(self.speeds) // 2])

    def _warmup(self, now: float) -> list[Action]:
        """Load this epoch's weights and peers, say Ready on a fixed timer, and once every member is ready
        send the warmup witness, so the first round starts as soon as all are, not at the timeout."""
        view = self.view
        assert view is not None
        run, me = view.run, view.me
        out: list[Action] = []
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

    def _join(self, now: float) -> list[Action]:
        """Join the next epoch, once per epoch marker, unless we are registered and pending already."""
        view = self.view
        assert view is not None
        run = view.run
        entry = next((e for e in run.registry if e.signer == self.wallet), None)
        marker = run.progress.epoch
        if (entry is None or not entry.pending) and self.join_sent_for != marker and self._allowed("join", now) \
                and "leave" not in self.inflight:  # our exit_run lands first, else it would undo the join  # fmt: skip
            self.join_sent_for = marker
            self._send("join")
            return [Join(self.throughput())]
        return []
