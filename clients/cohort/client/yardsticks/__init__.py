"""Yardsticks: what tests and benchmarks hold the product against, never imported by the client.

- `reference`: single-process AdamW on the same tokens (loss parity), and plain float64 loops for
  our aggregation rule and DeMo's / Psyche's scatter-mean (written apart from distro/aggregate.py).
- `simulator`: N DisTrO replicas in one process exchanging real wire bytes (the 2-step pipeline).
- `parity`: the loss-parity experiment (DisTrO vs AdamW vs sign-SGD) built from the two above.

Their own room so `distro/` holds only the optimizer every replica runs: the experiment pulls in
`data/` and `model/`, which the optimizer never needs.
"""

from .parity import Curve, ParityReport, ParitySetup, run_parity
from .reference import demo_coefficients, reference_coefficients, reference_signs, train_adamw
from .simulator import DataParallelSimulator, SimulationLog, StepRecord

__all__ = [
    "Curve",
    "DataParallelSimulator",
    "ParityReport",
    "ParitySetup",
    "SimulationLog",
    "StepRecord",
    "demo_coefficients",
    "reference_coefficients",
    "reference_signs",
    "run_parity",
    "train_adamw",
]
