"""Building a fresh model from a `transformers` config, reproducibly on any hardware.

A run's first weights come from a seed every member derives (runtime/trainer.initial_seed), so every member
must draw the very same bits whatever it runs on: a GPU's random generator is not a CPU's, and a member that
spans several processes must not build the whole model in each (runtime/sharded.py). So the model is built
with its parameters on the meta device (no memory; buffers as usual), and each module's parameters are then
drawn on the CPU, a decoder layer or a module at a time, by the model's own initialisation (`_init_weights`)
under a generator seeded by (seed, its name) — `initial_values` — and put where they belong: the whole model on one
device (`build_model`), or each rank's rows of them (`sharded._Rank`).
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Iterator

import torch
from transformers import AutoModelForCausalLM, PretrainedConfig, PreTrainedModel
from transformers.modeling_utils import init_empty_weights


def empty_model(config: PretrainedConfig) -> PreTrainedModel:
    """`config`'s causal LM with every parameter on the meta device (its buffers real, on the CPU)."""
    with init_empty_weights(include_buffers=False):
        model = AutoModelForCausalLM.from_config(config)
    model.tie_weights()  # tied embeddings one parameter, as a model built with weights has them
    return model


def _module_seed(seed: int, name: str) -> int:
    return (
        int.from_bytes(hashlib.sha256(f"cohort/init/{seed}/{name}".encode()).digest()[:8], "little")
        >> 1
    )


def _units(
    module: torch.nn.Module, prefix: str = ""
) -> Iterator[tuple[str, torch.nn.Module, bool]]:
    """(name, module, whole) of what is initialised at once: every element of a ModuleList whole (a decoder
    layer: an initialisation may treat a layer's parameters together, as GPT-2 scales its output projections),
    and every other module's own parameters."""
    if isinstance(module, torch.nn.ModuleList):
        for name, child in module.named_children():
            yield f"{prefix}{name}", child, True
        return
    if any(p is not None for p in module._parameters.values()):
        yield prefix.rstrip("."), module, False
    for name, child in module.named_children():
        yield from _units(child, f"{prefix}{name}.")


def initial_values(
    model: PreTrainedModel, seed: int
) -> Iterator[tuple[torch.nn.Parameter, torch.Tensor]]:
    """Every parameter of `model` (only its shape and dtype are read: meta, sharded or real) with its initial
    values as a whole CPU tensor, drawn a unit at a time (`_units`; memory: one decoder layer) by the model's
    own initialisation, applied as `init_weights` applies it (children first), under a generator seeded by
    (seed, the unit's name). A parameter shared by two modules (tied embeddings) comes twice; the later values
    are its own."""
    for name, unit, whole in _units(model):
        if whole:
            stand_in = copy.deepcopy(unit).to_empty(device="cpu")  # meta parameters: nothing copied
            params = dict(unit.named_parameters(remove_duplicate=False))
        else:  # the module's class and settings, with whole CPU parameters of its own (its children apart)
            stand_in = copy.copy(unit)
            stand_in._parameters = {k: None if p is None else torch.nn.Parameter(torch.empty(tuple(p.shape), dtype=p.dtype))
                                    for k, p in unit._parameters.items()}  # fmt: skip
            stand_in._modules = {}
            params = {k: p for k, p in unit._parameters.items() if p is not None}
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            torch.manual_seed(_module_seed(seed, name))
            stand_in.apply(model._init_weights)
        drawn = dict(stand_in.named_parameters(remove_duplicate=False))
        for key, p in params.items():
            yield p, drawn[key].data


def build_model(
    config: PretrainedConfig, seed: int = 0, device: str | torch.device = "cpu"
) -> PreTrainedModel:
    """A freshly initialised causal LM of `config`'s class (Llama, DeepSeek-V3, ...) on `device` ("meta": no
    weights at all); the same seed gives bit-identical weights on every device."""
    device = torch.device(device)
    model = empty_model(config)
    if device.type == "meta":
        return model
    buffers = {name: b.clone() for name, b in model.named_buffers()}
    model.to_empty(device=device)  # every parameter its own memory (tied ones tied again below)
    model.tie_weights()
    with torch.no_grad():
        for name, b in model.named_buffers():
            b.copy_(buffers[name])
        for param, values in initial_values(model, seed):
            param.copy_(values)
    return model
