"""The trainer's side of verification, with real models: when the run verifies, each step's payload commits
the trainer's optimizer state (wire v2 header) and the state itself is returned for serving; a verifier
replica, holding the same weights at the step's start, replays a peer's step from the two committed states
and passes an honest one, fails a negated payload, and refuses a state that is not the committed one."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from cohort.client.distro import DistroResult
from cohort.client.distro.compress import SparseTiles
from cohort.client.runtime.local_run import write_config
from cohort.client.runtime.trainer import LocalReplica
from cohort.client.verify.sample import commit
from cohort.client.verify.state import CommittedState, capture, encode_state
from cohort.sdk.coordinator_core import CoordinatorCore
from cohort.sdk.presets import training_spec
from cohort.sdk.run_config import load_run_file

SEED = b"a check seed"


def served(state: CommittedState) -> tuple[bytes, dict[bytes, bytes]]:
    """What the trainer serves of a committed state: its manifest and every part, by hash."""
    parts = state.read_parts()
    assert all(hashlib.sha256(p).digest() == h for h, p in parts.items())
    return state.manifest.encode(), parts


def spec_of(path: Path):
    run_file = load_run_file(path, CoordinatorCore())
    return training_spec(run_file.metadata, run_file.model)


@pytest.fixture(scope="module")
def replicas(tmp_path_factory) -> tuple[LocalReplica, LocalReplica, list]:
    """Two replicas of one run trained steps 1-3 in lock step (each its own batch, both results applied
    two steps later): returns (trainer, verifier, [(payload, state) of the trainer per step])."""
    path = write_config(Path(tmp_path_factory.mktemp("run")) / "run.toml", max_seq_len=32)
    spec = spec_of(path)
    trainer, verifier = LocalReplica(spec, seed=7), LocalReplica(spec, seed=7)
    for replica in (trainer, verifier):
        replica.start_epoch(1, cold=False, verified=True)
    outputs, mine = [], []
    for step in (1, 2, 3):
        if step >= 3:  # the pipeline: step s trains on the weights after step s - 2's results
            for replica in (trainer, verifier):
                replica.apply(step - 2, [outputs[step - 3][0], mine[step - 3]])
        out = trainer.train(step, 4 * step, 4 * step + 4)
        own = verifier.train(step, 100 + 4 * step, 104 + 4 * step)
        outputs.append(
            (out.payload, served(out.state))
        )  # served from disk: a verifier fetches its parts
        mine.append(own.payload)
    return trainer, verifier, outputs


def test_each_step_commits_the_state_it_returns(replicas):
    trainer, _, outputs = replicas
    for step, (payload, state) in enumerate(outputs, start=1):
        header = trainer.check(payload)
        manifest, _ = state
        assert header.step == step and header.state == hashlib.sha256(manifest).digest()


def test_an_honest_step_passes_and_a_negated_one_fails(replicas):
    trainer, verifier, outputs = replicas
    (previous, before), (published, after) = outputs[1], outputs[2]
    assert verifier.can_verify(3) and not verifier.can_verify(99)
    wanted = verifier.check_parts(SEED, before[0], after[0])
    assert set(wanted) <= set(before[1]) | set(after[1])
    honest = verifier.verify_step(
        3, published, previous, SEED, before[0], before[1], after[0], after[1]
    )
    assert honest is not None and honest.passed, honest
    # what check_parts named is all a check reads
    only = {h: p for h, p in (before[1] | after[1]).items() if h in wanted}
    assert verifier.verify_step(
        3, published, previous, SEED, before[0], only, after[0], only
    ).passed

    result = trainer.codec.decode(published).result
    flipped = trainer.codec.encode(DistroResult(result.step, result.batch,
                                                tuple(SparseTiles(t.indices, -t.values) for t in result.tiles),
                                                result.state))  # fmt: skip
    verdict = verifier.verify_step(
        3, flipped, previous, SEED, before[0], before[1], after[0], after[1]
    )
    assert verdict is not None and not verdict.passed


def test_a_state_other_than_the_committed_one_is_refused(replicas):
    _, verifier, outputs = replicas
    (previous, _), (published, after) = outputs[1], outputs[2]
    older = outputs[0][1]  # the state after step 1
    verdict = verifier.verify_step(
        3, published, previous, SEED, older[0], older[1], after[0], after[1]
    )
    assert verdict is not None and not verdict.passed and verdict.reason.startswith("refused")
    verdict = verifier.verify_step(3, published, previous, SEED, b"{}", {}, after[0], after[1])
    assert verdict is not None and verdict.reason.startswith("refused: not a state manifest")


def test_without_verification_nothing_is_committed(tmp_path):
    path = write_config(tmp_path / "run.toml", max_seq_len=32)
    trainer = LocalReplica(spec_of(path), seed=7)
    trainer.start_epoch(1, cold=False)
    out = trainer.train(1, 0, 4)
    assert (
        out.state is None
        and trainer.check(out.payload).state == bytes(32)
        and not trainer.can_verify(1)
    )


def test_a_check_borrows_the_verifiers_replica_and_gives_it_back_unchanged(replicas):
    """No second model: the replay runs on the verifier's own model and optimizer, whose weights and state
    wait on disk meanwhile and come back bit for bit."""
    _, verifier, outputs = replicas
    (previous, before), (published, after) = outputs[1], outputs[2]

    def state() -> bytes:
        layout = verifier.optimizer.layout
        return commit(
            encode_state(capture(verifier.optimizer, 0, copy=False), layout), layout
        ).commitment

    digest, own = verifier.digest(), state()
    assert verifier.verify_step(
        3, published, previous, SEED, before[0], before[1], after[0], after[1]
    ).passed
    assert verifier.digest() == digest and state() == own
    assert not any(p.grad is not None for p in verifier.model.parameters())


def test_activation_checkpointing_changes_no_bit(tmp_path):
    """Recomputing activations in the backward runs the same kernels on the same inputs: payloads, committed
    states and weights are those of a replica that keeps every activation."""
    spec = spec_of(write_config(tmp_path / "run.toml", max_seq_len=32))
    plain, lean = (
        LocalReplica(spec, seed=7),
        LocalReplica(spec, seed=7, activation_checkpointing=True),
    )
    for replica in (plain, lean):
        replica.start_epoch(1, cold=False, verified=True)
    for step in (1, 2):
        a, b = plain.train(step, 4 * step, 4 * step + 4), lean.train(step, 4 * step, 4 * step + 4)
        assert (
            a.payload == b.payload and a.state.commitment == b.state.commitment and a.loss == b.loss
        )
        plain.apply(step, [a.payload])
        lean.apply(step, [b.payload])
    assert plain.digest() == lean.digest()
