"""The epoch's end: apply what was decided, save the checkpoint, vote its hash."""

from __future__ import annotations

from .actions import (
    Action,
    Emit,
    SaveCheckpoint,
    VoteWeights,
)
from .state import MachineState


class Cooldown(MachineState):
    def _on_saved(self, epoch: int, step: int, manifest: bytes, digest: str) -> list[Action]:
        self.saving = False
        if epoch != self.epoch:
            return []
        self.saved_manifest = (step, manifest)
        self.weights_epoch = epoch + 1
        self.epoch = None
        return [Emit("epoch_end", {"epoch": epoch, "step": step, "applied": self.applied, "digest": digest}),
                Emit("checkpoint_saved", {"epoch": epoch, "step": step, "manifest": manifest.hex()})]  # fmt: skip

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

    def _save(self, epoch: int) -> list[Action]:
        """Write `epoch`'s checkpoint once every decided step is applied and no model job is in flight."""
        view = self.view
        assert view is not None
        done = view.newest is not None and self.applied >= view.newest
        if done and not self.saving and self.applying is None and self.training is None:
            self.saving = True
            return [SaveCheckpoint(epoch, view.run.progress.step)]
        return []
