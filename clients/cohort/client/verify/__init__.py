"""Verification of honest work by momentum-committed recomputation (see README.md).

A trainer publishes with its result of step s the commitment of its optimizer state after step s
(the sha256 of a manifest of hashed parts); a verifier drawn after the commitment fetches the sign
plane and a seed-sampled few bands of the states after s - 1 and s, replays step s with the real
optimizer code and compares the sampled bands. Plain tensors and bytes; never imports the SDK.
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
from .sample import (
    CHECK_SAMPLES,
    CommittedParts,
    MissingPart,
    Sample,
    commit,
    parts_to_fetch,
    sample_bands,
    sample_seed,
    state_manifest,
)
from .state import (
    BEFORE_ANY_STEP,
    CommittedState,
    OptimizerState,
    StateError,
    StateMismatch,
    capture,
    decode_state,
    encode_state,
    restore,
    state_bytes,
    write_state,
)

__all__ = [
    "BEFORE_ANY_STEP",
    "CHECK_SAMPLES",
    "MAX_MOMENTUM_ERROR",
    "MAX_SENT_ERROR",
    "MAX_VALUE_ERROR",
    "MIN_INDEX_AGREEMENT",
    "MIN_SIGN_AGREEMENT",
    "CommittedParts",
    "CommittedState",
    "MissingPart",
    "OptimizerState",
    "PayloadAgreement",
    "Replay",
    "Replayer",
    "Sample",
    "StateAgreement",
    "StateError",
    "StateMismatch",
    "StepInputs",
    "Thresholds",
    "Verdict",
    "capture",
    "check_step",
    "commit",
    "compare_payloads",
    "compare_states",
    "decode_state",
    "encode_state",
    "judge",
    "parts_to_fetch",
    "restore",
    "sample_bands",
    "sample_seed",
    "snapshot_weights",
    "state_bytes",
    "state_manifest",
    "tiles_agreement",
    "write_state",
]
