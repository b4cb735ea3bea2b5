"""Models: Llama-style causal LMs from `transformers` configs, and their loss."""

from .digest import parameter_digest
from .llama import PRESETS, build_model, llama_config
from .loss import evaluate, lm_loss

__all__ = ["PRESETS", "build_model", "evaluate", "llama_config", "lm_loss", "parameter_digest"]
