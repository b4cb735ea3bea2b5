"""Models: causal LMs (Llama, DeepSeek-V3 with MLA, any `transformers` causal LM) from configs,
their loss, held-out evaluation and weight digests."""

from .architectures import ARCHITECTURES, config_for
from .build import build_model
from .digest import parameter_digest, weights_checksum
from .evaluation import EvalResult, evaluate
from .llama import PRESETS, llama_config
from .loss import lm_loss

__all__ = [
    "ARCHITECTURES",
    "PRESETS",
    "EvalResult",
    "build_model",
    "config_for",
    "evaluate",
    "llama_config",
    "lm_loss",
    "parameter_digest",
    "weights_checksum",
]
