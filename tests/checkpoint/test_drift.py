"""Replica drift: a perturbed replica is detected by its digest and repaired from the checkpoint."""

from __future__ import annotations

import logging

import torch
from support.tiny_models import tiny_model

from cohort.client.checkpoint import repair_drift, save_checkpoint
from cohort.client.model import parameter_digest


def test_a_perturbed_replica_reloads_the_checkpoint(tmp_path, caplog):
    replicas = [tiny_model(), tiny_model()]
    info = save_checkpoint(replicas[0], tmp_path, run_id="r", step=9, epoch=3)
    optimizer = torch.optim.SGD(replicas[1].parameters(), lr=0.1)
    with torch.no_grad():  # one near-zero sign flipped on another GPU
        replicas[1].model.layers[2].mlp.up_proj.weight[3, 7] *= -1

    healthy = repair_drift(replicas[0], info.path, info.manifest_hash)
    assert not healthy.drifted and not healthy.reloaded
    with caplog.at_level(logging.WARNING):
        drifted = repair_drift(replicas[1], info.path, info.manifest_hash)
    assert drifted.drifted and drifted.reloaded and "replica drift" in caplog.text
    assert (
        parameter_digest(replicas[1]) == parameter_digest(replicas[0]) == drifted.checkpoint_digest
    )
    # repaired in place: the optimizer still holds the model's parameters
    assert optimizer.param_groups[0]["params"][0] is next(replicas[1].parameters())
