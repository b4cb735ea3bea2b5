"""The model side's one seam: every kind of replica the client builds is a `Replica` (the protocol names
exactly what the runtime calls), and the slowed wrapper forwards each member itself, not by fallback."""

from __future__ import annotations

from pathlib import Path

import pytest

from cohort.client.runtime.local_run import write_config
from cohort.client.runtime.replica import Replica
from cohort.client.runtime.slowdown import SlowedReplica
from cohort.client.runtime.synthetic import SyntheticReplica
from cohort.client.runtime.trainer import LocalReplica
from cohort.sdk.coordinator_core import CoordinatorCore
from cohort.sdk.presets import training_spec
from cohort.sdk.run_config import load_run_file

MEMBERS = sorted(name for name in vars(Replica) if not name.startswith("_"))


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    path = write_config(Path(tmp_path_factory.mktemp("run")) / "run.toml", max_seq_len=16)
    run_file = load_run_file(path, CoordinatorCore())
    return training_spec(run_file.metadata, run_file.model)


def test_the_protocol_names_what_the_runtime_calls():
    assert MEMBERS == sorted(["apply", "can_verify", "check", "check_parts", "checkpoint", "checksum", "device", "digest", "evaluate", "holding",
                              "load", "model", "payload_size", "start_epoch", "state_manifest_limit", "train",
                              "verify_step"])  # fmt: skip


def test_every_kind_of_replica_is_one(spec):
    local, synthetic = LocalReplica(spec, seed=0), SyntheticReplica(spec, seed=0)
    for replica in (local, synthetic, SlowedReplica(local, 2.0), SlowedReplica(synthetic, 2.0)):
        assert isinstance(replica, Replica), type(replica).__name__


def test_the_slowed_replica_forwards_every_member_itself(spec):
    assert not hasattr(SlowedReplica, "__getattr__")
    assert all(name in vars(SlowedReplica) for name in MEMBERS), set(MEMBERS) - set(
        vars(SlowedReplica)
    )
    inner = LocalReplica(spec, seed=0)
    slowed = SlowedReplica(inner, 1.0)
    slowed.start_epoch(1, cold=False, verified=True)
    out = slowed.train(1, 0, 2)
    assert slowed.check(out.payload) == inner.check(out.payload) and out.state is not None
    assert (slowed.model, slowed.device) == (inner.model, inner.device)
    assert (slowed.payload_size, slowed.state_manifest_limit) == (
        inner.payload_size,
        inner.state_manifest_limit,
    )
    assert slowed.can_verify(1) and not slowed.can_verify(2)
    slowed.apply(1, [out.payload])
    assert (slowed.digest(), slowed.checksum()) == (inner.digest(), inner.checksum())


def test_the_sharded_replica_names_every_member():
    """Built only on rank 0 of a process group (test_sharded_replica runs one); here its class is checked."""
    from cohort.client.runtime.sharded import ShardedReplica

    assert all(hasattr(ShardedReplica, name) or name == "device" for name in MEMBERS)
