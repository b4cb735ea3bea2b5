"""Verification of honest work by momentum-committed recomputation (see README.md).

A trainer publishes with its result of step s the sha256 of its optimizer state after step s;
a verifier drawn after the commitment gets the states after s - 1 and s, replays step s with
the real optimizer code and compares. Plain tensors and bytes; never imports the SDK.
"""

from .check import check_step
from .compare import (
    MAX_MOMENTUM_ERROR,
    MAX_SENT_ERROR,
    MAX_VALUE_ERROR,
    MIN_INDEX_AGREEMENT,
    MIN_SIGN_AGREEMENT,
    PayloadAgreement,
    StateAgreement,
    Thresholds,
    Verdict,
    compare_payloads,
    compare_states,
    judge,
    tiles_agreement,
)
from .recompute import Replay, Replayer, StepInputs, snapshot_weights
from .state import (
    BEFORE_ANY_STEP,
    OptimizerState,
    StateError,
    StateMismatch,
    capture,
    decode_state,
    encode_state,
    load_committed,
    load_state_bytes,
    restore,
    state_bytes,
    state_commitment,
)

__all__ = [
    "BEFORE_ANY_STEP",
    "MAX_MOMENTUM_ERROR",
    "MAX_SENT_ERROR",
    "MAX_VALUE_ERROR",
    "MIN_INDEX_AGREEMENT",
    "MIN_SIGN_AGREEMENT",
    "OptimizerState",
    "PayloadAgreement",
    "Replay",
    "Replayer",
    "StateAgreement",
    "StateError",
    "StateMismatch",
    "StepInputs",
    "Thresholds",
    "Verdict",
    "capture",
    "check_step",
    "compare_payloads",
    "compare_states",
    "decode_state",
    "encode_state",
    "judge",
    "load_committed",
    "load_state_bytes",
    "restore",
    "snapshot_weights",
    "state_bytes",
    "state_commitment",
    "tiles_agreement",
]
