import pytest
import torch

from cohort.client.data import ByteTokenizer, TokenDataset, pydoc_text
from cohort.client.distro import Constant, DistroConfig
from cohort.client.model import lm_loss, parameter_digest
from cohort.client.yardsticks import DataParallelSimulator


@pytest.fixture(scope="module")
def dataset():
    return TokenDataset(ByteTokenizer().encode(pydoc_text()[:200_000]), seq_len=32, seed=0)


def test_replicas_stay_bit_identical_with_bf16_weights(tiny_model, dataset):
    """bf16 weights are where Psyche's add-back lookahead drifts; restoring the saved weights does not."""
    config = DistroConfig(compression_chunk=32, compression_topk=8)
    start = parameter_digest(tiny_model.to(torch.bfloat16))
    sim = DataParallelSimulator(
        tiny_model, 3, config, Constant(1e-3), dataset.sequences, 6, lm_loss
    )
    log = sim.run(5)
    digests = {parameter_digest(m) for m in sim.models}
    assert len(digests) == 1 and start not in digests
    assert [r.step for r in log.steps] == [0, 1, 2, 3, 4]
    assert {r.payload_bytes for r in log.steps} == {sim.optimizers[0].codec.size}
    assert sim.step == 7 and not sim._in_flight  # two flush rounds applied the last results


def test_simulator_validates_input(tiny_model, dataset):
    with pytest.raises(ValueError, match="replicas must be >= 1"):
        DataParallelSimulator(
            tiny_model, 0, DistroConfig(), Constant(1e-3), dataset.sequences, 4, lm_loss
        )
    sim = DataParallelSimulator(
        tiny_model, 2, DistroConfig(), Constant(1e-3), dataset.sequences, 4, lm_loss
    )
    with pytest.raises(ValueError, match="steps must be >= 0"):
        sim.run(-1)
