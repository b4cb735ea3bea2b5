"""What memory one member needs for a run: parameters counted from the preset's shape, bytes from the
per-parameter table below, activations from the values a layer keeps per token (ACTIVATION_VALUES, fitted
to the client's own models).

`cohort run create` prints it, `cohort run presets` marks the presets no single member can hold, and
`cohort train` refuses before building anything when its device cannot hold it. Pure arithmetic on the
`TrainingSpec` (no torch: the SDK never imports it), so a creator without the training stack sees the same
figure a member's client checks against.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from .models import RunConfig
from .presets import TrainingSpec

GIB = 1 << 30

# Bytes a member holds per model parameter, all fp32: the one place to change when the client's memory
# changes. "momentum" and "lookahead" are DisTrO's state; "distro_working" is its bounded working set
# (capped at DISTRO_WORKING_CAP bytes); "verification" is what a member holds in memory for checks while the
# run verifies results (verification_percent > 0): its snapshots and committed states live on disk and a check
# borrows its own model, so what remains is what a running check fetched: the sign plane of the trainer's
# state (2 bits a value) and a few sampled bands (a fixed ~16 MiB, left out here).
BYTES_PER_PARAM: Mapping[str, float] = MappingProxyType({
    "weights": 4.0,
    "gradients": 4.0,
    "momentum": 4.0,
    "lookahead": 0.5,
    "distro_working": 0.25,
    "verification": 0.25,
})  # fmt: skip
DISTRO_WORKING_CAP = 256 << 20
ACTIVATION_BYTES = 4  # fp32 activations
LOGIT_COPIES = 3  # logits, their log-softmax and its gradient live at once in the loss

# Activation values a layer keeps per token for the backward pass, per unit of the model's shape: fitted to
# the peak of one forward/backward of the client's own models on CPU (transformers, SDPA attention). For
# Llama and DeepSeek shapes of 1M-300M parameters at 256-2,048 tokens the estimate is 0.9-1.25× the
# measured peak (a tiny DeepSeek with wide heads measured up to 1.5× its estimate). The textbook
# (34·h + 5·heads·seq) bytes at 16 bits (Korthikanti et al. 2022) counts an attention matrix that SDPA does
# not keep here: 3.3× the measured peak of llama-20m at 2,048 tokens.
ACTIVATION_VALUES: Mapping[str, float] = MappingProxyType({
    "llama_hidden": 20,  # per hidden unit: norms, residuals, q/k/v/o in and out, rotary copies
    "deepseek_hidden": 20,
    "gpt2_hidden": 8,
    "mlp": 4,  # per intermediate unit a token passes through: gate, up, activation, product
    "mla_head_dim": 6,  # per head and (qk + v) dimension of multi-head latent attention
    "routed_expert_hidden": 3,  # per hidden unit and expert a token is routed to: its gathered copies
    "attention_matrix": 4,  # per head and position where the attention matrix is kept (GPT-2's dropout)
})  # fmt: skip

# One member is one process on one device: past this no machine a member could run on holds the model.
MAX_MEMBER_BYTES = 1 << 40
# the device a sharded member would be counted in (an 80 GB accelerator)
SHARD_DEVICE_BYTES = 80 * 10**9


@dataclass(frozen=True)
class Shape:
    """A model's parameter count and what its activations grow with: values kept per token (all layers),
    and the heads (all layers) that keep a seq × seq attention matrix; its layers and hidden width (what
    activation checkpointing keeps: each layer's input), and the parameters outside its layers (embeddings,
    head, final norm: what a sharded member holds whole while it computes)."""

    parameters: int
    values_per_token: float
    matrix_heads: int = 0
    layers: int = 1
    hidden: int = 0
    outside_layers: int = 0

    @property
    def largest_layer(self) -> int:
        """Parameters of one layer (the mean; a sharded member gathers one layer at a time)."""
        return (self.parameters - self.outside_layers) // max(self.layers, 1)


def _llama(c: Mapping[str, Any], vocab: int, seq: int) -> Shape:
    # defaults are LlamaConfig's, for keys a preset leaves out
    h, layers = c.get("hidden_size", 4096), c.get("num_hidden_layers", 32)
    heads = c.get("num_attention_heads", 32)
    kv_heads = c.get("num_key_value_heads") or heads
    head_dim = c.get("head_dim") or h // heads
    inter = c.get("intermediate_size", 11008)
    bias = c.get("attention_bias", False)
    attention = h * heads * head_dim * 2 + h * kv_heads * head_dim * 2  # q, o; k, v
    if bias:
        attention += heads * head_dim + 2 * kv_heads * head_dim + h
    mlp = 3 * h * inter + (2 * inter + h if c.get("mlp_bias", False) else 0)
    layer = attention + mlp + 2 * h  # + input and post-attention RMSNorms
    embeddings = vocab * h
    head = 0 if c.get("tie_word_embeddings", False) else vocab * h
    values = layers * (ACTIVATION_VALUES["llama_hidden"] * h + ACTIVATION_VALUES["mlp"] * inter)
    return Shape(
        embeddings + layers * layer + h + head, values, 0, layers, h, embeddings + h + head
    )


def _deepseek(c: Mapping[str, Any], vocab: int, seq: int) -> Shape:
    # multi-head latent attention: q through an optional low-rank (q_lora_rank), k/v through kv_lora_rank
    h, layers, heads = c["hidden_size"], c["num_hidden_layers"], c["num_attention_heads"]
    nope, rope, v = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
    q_lora, kv_lora = c.get("q_lora_rank"), c["kv_lora_rank"]
    bias = c.get("attention_bias", False)
    qk = nope + rope
    if q_lora is None:
        q = h * heads * qk
    else:
        q = h * q_lora + (q_lora if bias else 0) + q_lora + q_lora * heads * qk  # a, its norm, b
    kv = (
        h * (kv_lora + rope)
        + ((kv_lora + rope) if bias else 0)
        + kv_lora
        + kv_lora * heads * (nope + v)
    )
    o = heads * v * h + (h if bias else 0)
    attention = q + kv + o
    dense = 3 * h * c["intermediate_size"]
    experts, shared = c.get("n_routed_experts", 1), c.get("n_shared_experts", 1)
    width = c.get("moe_intermediate_size", c["intermediate_size"])
    moe = experts * 3 * h * width + 3 * h * width * shared + experts * h  # routed, shared, router
    first_moe = min(c.get("first_k_dense_replace", layers), layers)
    blocks = layers * (attention + 2 * h) + first_moe * dense + (layers - first_moe) * moe
    head = 0 if c.get("tie_word_embeddings", False) else vocab * h
    a = ACTIVATION_VALUES
    per_layer = a["deepseek_hidden"] * h + a["mla_head_dim"] * heads * (qk + v)
    routed = c.get("num_experts_per_tok", 1)
    moe_values = a["mlp"] * width * (routed + shared) + a["routed_expert_hidden"] * h * routed
    values = (
        layers * per_layer
        + first_moe * a["mlp"] * c["intermediate_size"]
        + (layers - first_moe) * moe_values
    )
    return Shape(vocab * h + blocks + h + head, values, 0, layers, h, vocab * h + h + head)


def _gpt2(c: Mapping[str, Any], vocab: int, seq: int) -> Shape:
    h, layers, heads = c.get("n_embd", 768), c.get("n_layer", 12), c.get("n_head", 12)
    inner = c.get("n_inner") or 4 * h
    layer = (
        2 * h + (h * 3 * h + 3 * h) + (h * h + h) + 2 * h + (h * inner + inner) + (inner * h + h)
    )
    head = 0 if c.get("tie_word_embeddings", True) else vocab * h
    values = layers * (ACTIVATION_VALUES["gpt2_hidden"] * h + ACTIVATION_VALUES["mlp"] * inner)
    outside = vocab * h + seq * h + 2 * h + head
    return Shape(outside + layers * layer, values, layers * heads, layers, h, outside)


def shape_of(
    architecture: str, hf_config: Mapping[str, Any], vocab_size: int, max_seq_len: int
) -> Shape | None:
    """The parameter count and shape of a model of `architecture` with a preset's `hf_config`; None for an
    HfAuto model this module does not know (any `transformers` causal LM may be named there)."""
    if architecture == "HfLlama":
        return _llama(hf_config, vocab_size, max_seq_len)
    if architecture == "HfDeepseek":
        return _deepseek(hf_config, vocab_size, max_seq_len)
    if architecture == "HfAuto" and hf_config.get("model_type") == "gpt2":
        return _gpt2(hf_config, vocab_size, max_seq_len)
    return None


def model_shape(spec: TrainingSpec) -> Shape | None:
    """The shape of the run's model (see shape_of)."""
    return shape_of(spec.architecture, spec.hf_config, spec.vocab_size, spec.max_seq_len)


def parameter_count(spec: TrainingSpec) -> int | None:
    """The number of parameters of the run's model (tied embeddings counted once), None when unknown."""
    shape = model_shape(spec)
    return None if shape is None else shape.parameters


def format_bytes(n: float) -> str:
    """Bytes as a short figure in binary units (MiB, GiB, TiB)."""
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    mib = n / (1 << 20)
    return f"{mib:.0f} MiB" if mib >= 10 else f"{mib:.1f} MiB"


def format_count(n: int) -> str:
    """A parameter count as a short figure (0.9M, 1.07B)."""
    if n >= 10**9:
        return f"{n / 1e9:.3g}B"
    return f"{n / 1e6:.3g}M" if n >= 10**5 else f"{n:,}"


@dataclass(frozen=True)
class MemoryEstimate:
    """The bytes one member holds for a run, by part. Activations are those of one micro-batch of
    `micro_batch_size` sequences of `seq_len` tokens (gradient accumulation frees them between)."""

    parameters: int
    micro_batch_size: int
    seq_len: int
    weights: int
    gradients: int
    optimizer: int  # DisTrO momentum and lookahead
    distro_working: int  # DisTrO's bounded working set
    activations: int
    verification: int  # 0 when the run does not verify results
    ranks: int = 1  # processes the member spans: every figure is one rank's
    gathered: int = (
        0  # a sharded rank's whole copies while it computes (outside the layers, one layer)
    )

    @property
    def total(self) -> int:
        return (self.weights + self.gradients + self.optimizer + self.distro_working + self.activations
                + self.verification + self.gathered)  # fmt: skip

    @property
    def bytes_per_param(self) -> float:
        """What the member holds per parameter besides activations."""
        return (self.total - self.activations) / max(self.parameters, 1)

    @property
    def untrainable(self) -> str | None:
        """Why no single member can hold this, or None when one can."""
        if self.total <= MAX_MEMBER_BYTES:
            return None
        devices = math.ceil(self.total / SHARD_DEVICE_BYTES)
        return (f"no single member can hold this ({format_bytes(self.total)}): it needs a member sharded "
                f"over {devices}×80 GB devices")  # fmt: skip

    def summary(self) -> str:
        """One line: the total and its parts."""
        sequences = "sequence" if self.micro_batch_size == 1 else "sequences"
        verification = format_bytes(self.verification) if self.verification else "off"
        who = "a member" if self.ranks == 1 else f"each of a member's {self.ranks} ranks"
        gathered = (
            f", gathered while computing {format_bytes(self.gathered)}" if self.gathered else ""
        )
        return (f"{who} needs about {format_bytes(self.total)} (weights {format_bytes(self.weights)}, "
                f"gradients {format_bytes(self.gradients)}, "
                f"optimizer {format_bytes(self.optimizer + self.distro_working)}, "
                f"activations {format_bytes(self.activations)} per micro-batch of {self.micro_batch_size} "
                f"{sequences}, verification {verification}{gathered})")  # fmt: skip

    def to_json(self) -> dict[str, int | float]:
        return {"parameters": self.parameters, "micro_batch_size": self.micro_batch_size,
                "seq_len": self.seq_len, "weights": self.weights, "gradients": self.gradients,
                "optimizer": self.optimizer, "distro_working": self.distro_working,
                "activations": self.activations, "verification": self.verification, "ranks": self.ranks,
                "gathered": self.gathered, "total": self.total,
                "bytes_per_param": round(self.bytes_per_param, 3)}  # fmt: skip


# What a member keeps on disk, as the client keeps it (tests/sdk/test_sizing.py holds these equal to the
# client's own constants): its last checkpoints (fp32 weights: the last two epoch ends and one fetched as a
# joiner); and while the run verifies results, the weights at the start of each step a check may still replay
# (KEPT_SNAPSHOTS, any member may be drawn to verify any step) and its own committed states (fp32 momentum and
# the 2-bit sign plane a parameter), each until the seeds that could draw a check of it are out (the step's
# and the next one's, ~CHECK_SEED_LAG + 2 steps), and for KEPT_STATES steps when a check was drawn on it.
CHECKPOINTS_KEPT = 3
SNAPSHOTS_KEPT = 11
STATES_KEPT = 16
STATES_PENDING = 6
STATE_BYTES_PER_PARAM = 4.25


@dataclass(frozen=True)
class DiskEstimate:
    """The bytes one member keeps on disk for a run, by part (the whole member, all its ranks)."""

    parameters: int
    checkpoints: int
    snapshots: int  # 0 when the run does not verify results
    states: int  # 0 when the run does not verify results

    @property
    def total(self) -> int:
        return self.checkpoints + self.snapshots + self.states

    def summary(self) -> str:
        if not self.snapshots:
            return f"on disk about {format_bytes(self.total)} (checkpoints)"
        return (f"on disk about {format_bytes(self.total)} (checkpoints {format_bytes(self.checkpoints)}, "
                f"weight snapshots for checks {format_bytes(self.snapshots)}, committed states "
                f"{format_bytes(self.states)})")  # fmt: skip

    def to_json(self) -> dict[str, int]:
        return {"checkpoints": self.checkpoints, "snapshots": self.snapshots, "states": self.states,
                "total": self.total}  # fmt: skip


def estimate_disk(parameters: int, verification_percent: int) -> DiskEstimate:
    """What a member of a model of `parameters` keeps on disk in a run that checks `verification_percent` %
    of the trainers' steps: a state is drawn on with its step's check or the next one's (about twice the
    rate), and then kept its full window. Measured in a 3-member localnet run of ~200 steps: at most 8 states
    at 1% (this counts 8), 15 at 10% (this: 14)."""
    if not 0 <= verification_percent <= 100:
        raise ValueError(f"verification_percent must be 0..100, got {verification_percent}")
    weights = parameters * BYTES_PER_PARAM["weights"]
    if not verification_percent:
        return DiskEstimate(parameters, int(CHECKPOINTS_KEPT * weights), 0, 0)
    drawn = min(1.0, 2 * verification_percent / 100)
    # states drawn on among the last STATES_KEPT steps: binomial, counted at its mean + 3 sigma (a disk fills
    # at the peak, not on average)
    mean = drawn * STATES_KEPT
    states = min(STATES_KEPT, STATES_PENDING + math.ceil(mean + 3 * math.sqrt(mean * (1 - drawn))))
    return DiskEstimate(parameters, int(CHECKPOINTS_KEPT * weights), int(SNAPSHOTS_KEPT * weights),
                        int(states * parameters * STATE_BYTES_PER_PARAM))  # fmt: skip


def activation_bytes(
    shape: Shape, vocab: int, seq: int, sequences: int, checkpointed: bool = False
) -> int:
    """Activations of one micro-batch of `sequences` sequences at their peak in the backward pass: the
    layers' kept values, attention matrices where kept, and the logits' copies in the loss. `checkpointed`
    (activation checkpointing, `cohort train --lean-memory`): every layer keeps only its input, and one
    layer's values are recomputed at a time."""
    values = (
        shape.values_per_token + ACTIVATION_VALUES["attention_matrix"] * shape.matrix_heads * seq
    )
    if checkpointed:
        values = values / max(shape.layers, 1) + shape.hidden * shape.layers
    per_token = values + vocab * LOGIT_COPIES
    return int(per_token * ACTIVATION_BYTES * sequences * seq)


def default_micro_batch_size(config: RunConfig) -> int:
    """A member's whole share of one step when it does not split it (the client's default): the largest
    global batch shared equally by the members an epoch starts with."""
    return max(1, math.ceil(config.global_batch_size_end / max(config.init_min_clients, 1)))


def estimate_memory(
    spec: TrainingSpec,
    *,
    micro_batch_size: int,
    verification: bool,
    checkpointed: bool = False,
    ranks: int = 1,
) -> MemoryEstimate | None:
    """The memory one member (one of its `ranks`) needs to train `spec` with micro-batches of
    `micro_batch_size` sequences; None when the model's size is unknown (an HfAuto model this module cannot
    count)."""
    return estimate_for(spec.architecture, spec.hf_config, vocab_size=spec.vocab_size,
                        max_seq_len=spec.max_seq_len, micro_batch_size=micro_batch_size,
                        verification=verification, checkpointed=checkpointed, ranks=ranks)  # fmt: skip


def estimate_for(architecture: str, hf_config: Mapping[str, Any], *, vocab_size: int, max_seq_len: int,
                 micro_batch_size: int, verification: bool, checkpointed: bool = False,
                 ranks: int = 1) -> MemoryEstimate | None:  # fmt: skip
    """estimate_memory for a model shape alone (a preset before any run names its vocabulary). With `ranks`
    > 1, one rank of a sharded member: its share of everything held per parameter, the whole copies it
    gathers while computing (FSDP: the parameters outside the layers and one layer, weights and gradients,
    in fp32), and the activations of its share of the micro-batch."""
    if micro_batch_size < 1 or ranks < 1:
        raise ValueError(
            f"micro_batch_size and ranks must be >= 1, got {micro_batch_size}, {ranks}"
        )
    shape = shape_of(architecture, hf_config, vocab_size, max_seq_len)
    if shape is None:
        return None
    n, per = shape.parameters, BYTES_PER_PARAM
    held = -(-n // ranks)  # this rank's rows of every parameter
    gathered = (
        0
        if ranks == 1
        else (shape.outside_layers + shape.largest_layer) * (per["weights"] + per["gradients"])
    )
    return MemoryEstimate(
        parameters=n,
        micro_batch_size=micro_batch_size,
        seq_len=max_seq_len,
        weights=int(held * per["weights"]),
        gradients=int(held * per["gradients"]),
        optimizer=int(held * (per["momentum"] + per["lookahead"])),
        distro_working=int(min(held * per["distro_working"], DISTRO_WORKING_CAP)),
        activations=activation_bytes(
            shape, vocab_size, max_seq_len, -(-micro_batch_size // ranks), checkpointed
        ),
        verification=int(held * per["verification"]) if verification else 0,
        ranks=ranks,
        gathered=int(gathered),
    )


def run_estimate(
    spec: TrainingSpec,
    config: RunConfig,
    micro_batch_size: int | None = None,
    *,
    checkpointed: bool = False,
    ranks: int = 1,
) -> MemoryEstimate | None:
    """The estimate for a run's on-chain config: its verification setting, and micro-batches of
    `micro_batch_size` sequences (default: a member's whole share of a step); per rank of a member over
    `ranks` processes, with activation checkpointing when `checkpointed`."""
    return estimate_memory(spec, micro_batch_size=micro_batch_size or default_micro_batch_size(config),
                           verification=config.verification_percent > 0, checkpointed=checkpointed,
                           ranks=ranks)  # fmt: skip
