"""DisTrO hyperparameters (the names follow Psyche's `OptimizerDefinition::Distro`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

ValueDtype = Literal["bf16", "fp16", "fp32"]
ErrorFeedback = Literal["received", "unquantized"]
Transform = Literal["dct", "identity"]


@dataclass(frozen=True)
class DistroConfig:
    """How a client compresses its momentum and how everyone applies the aggregate.

    compression_decay:  momentum decay beta (Psyche default 0.999, Consilience 0.995).
    compression_chunk:  target tile edge; each dimension uses its largest divisor <= this.
    compression_topk:   coefficients kept per tile (clamped to the tile size).
    weight_decay:       decoupled weight decay lambda, applied locally as w *= 1 - lr*lambda.
    clip_grad_norm:     global gradient-norm clip before the momentum update (None = off).
    quantize_1bit:      send only the sign of each kept coefficient (bit-packed).
    value_dtype:        wire dtype of the kept values when quantize_1bit is off.
    error_feedback:     what is removed from the momentum after sending when quantize_1bit is on:
                        "received" removes what the 1-bit code can represent (the per-tile
                        L1 scale times the sign, as in EF-signSGD); "unquantized" removes the
                        unquantized values, as Psyche does. Without 1-bit both are the same.
    transform:          "dct" (DisTrO) or "identity" (top-k of the raw momentum: a sign-SGD
                        baseline that sends exactly the same bytes).
    """

    compression_decay: float = 0.999
    compression_chunk: int = 64
    compression_topk: int = 4
    weight_decay: float = 0.0
    clip_grad_norm: float | None = 1.0
    quantize_1bit: bool = True
    value_dtype: ValueDtype = "bf16"
    error_feedback: ErrorFeedback = "received"
    transform: Transform = "dct"

    def __post_init__(self) -> None:
        if not (
            0.0 <= self.compression_decay <= 1.0
        ):  # 0: no momentum carried over; the chain allows [0, 1)
            raise ValueError(f"compression_decay must be in [0, 1], got {self.compression_decay}")
        if not isinstance(self.compression_chunk, int) or self.compression_chunk < 1:
            raise ValueError(
                f"compression_chunk must be an int >= 1, got {self.compression_chunk!r}"
            )
        if not isinstance(self.compression_topk, int) or self.compression_topk < 1:
            raise ValueError(f"compression_topk must be an int >= 1, got {self.compression_topk!r}")
        if not (math.isfinite(self.weight_decay) and self.weight_decay >= 0.0):
            raise ValueError(f"weight_decay must be finite and >= 0, got {self.weight_decay}")
        if self.clip_grad_norm is not None and not (
            math.isfinite(self.clip_grad_norm) and self.clip_grad_norm > 0.0
        ):
            raise ValueError(f"clip_grad_norm must be > 0 or None, got {self.clip_grad_norm}")
        if self.value_dtype not in ("bf16", "fp16", "fp32"):
            raise ValueError(f"value_dtype must be bf16, fp16 or fp32, got {self.value_dtype!r}")
        if self.error_feedback not in ("received", "unquantized"):
            raise ValueError(
                f"error_feedback must be 'received' or 'unquantized', got {self.error_feedback!r}"
            )
        if self.transform not in ("dct", "identity"):
            raise ValueError(f"transform must be 'dct' or 'identity', got {self.transform!r}")
