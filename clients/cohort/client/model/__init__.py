"""Models: Llama-style causal LMs from `transformers` configs, and their loss."""

from .architectures import ARCHITECTURES, config_for
from .digest import parameter_digest
from .llama import PRESETS, build_model, llama_config
from .loss import evaluate, lm_loss

__all__ = ["ARCHITECTURES", "PRESETS", "build_model", "config_for", "evaluate", "llama_config", "lm_loss", "parameter_digest"]
