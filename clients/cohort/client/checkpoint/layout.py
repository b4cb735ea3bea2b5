"""What a checkpoint directory holds, and its identity.

A checkpoint is a Hugging Face model directory, loadable by
`transformers.AutoModelForCausalLM.from_pretrained` unchanged:

    config.json                        the transformers config of the model
    model.safetensors                  weights (or model-0000k-of-0000n.safetensors + index)
    tokenizer.json, tokenizer_config.json   when the run uses a BPE tokenizer
    cohort.json                        run id, step, epoch, parameter digest

Its identity is the sha256 of the canonical manifest (file names, sizes, chunk hashes) of the
whole directory: the P2P layer's `Manifest`, so the hash a checkpointer puts on chain is the very
hash peers serve the directory under.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from ..p2p.manifest import Manifest

COHORT_FILE = "cohort.json"
CONFIG_FILE = "config.json"
SINGLE_SHARD = "model.safetensors"
SHARD_INDEX = "model.safetensors.index.json"
FORMAT_VERSION = 1
MAX_COHORT_FILE = 64 << 10


class CheckpointError(Exception):
    """A checkpoint is missing, malformed, or not the one the caller trusts."""


@dataclass(frozen=True)
class CheckpointMeta:
    """cohort.json: where in the run the weights come from."""

    run_id: str
    step: int
    epoch: int
    parameter_digest: str  # model.digest.parameter_digest of the saved weights
    format_version: int = FORMAT_VERSION

    def encode(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True, indent=1).encode() + b"\n"

    @classmethod
    def read(cls, directory: Path) -> CheckpointMeta:
        path = directory / COHORT_FILE
        try:
            with open(path, "rb") as f:
                raw = f.read(MAX_COHORT_FILE + 1)
            doc = json.loads(raw)
        except OSError as e:
            raise CheckpointError(
                f"{directory}: no readable {COHORT_FILE} ({e.strerror})"
            ) from None
        except ValueError as e:
            raise CheckpointError(f"{path}: not JSON ({e})") from None
        fields = {"run_id": str, "step": int, "epoch": int, "parameter_digest": str}
        if (
            len(raw) > MAX_COHORT_FILE
            or not isinstance(doc, dict)
            or doc.get("format_version") != FORMAT_VERSION
            or any(
                not isinstance(doc.get(k), t) or isinstance(doc.get(k), bool)
                for k, t in fields.items()
            )
        ):
            raise CheckpointError(
                f"{path}: expected format_version {FORMAT_VERSION} and {', '.join(fields)}"
            )
        return cls(**{k: doc[k] for k in fields})


@dataclass(frozen=True)
class CheckpointInfo:
    """A checkpoint on disk: where, its manifest hash (what the chain carries), and its step."""

    path: Path
    manifest_hash: bytes
    step: int

    @property
    def manifest_hex(self) -> str:
        return self.manifest_hash.hex()


def directory_manifest(directory: str | Path) -> Manifest:
    """The manifest of a checkpoint directory (reads every byte)."""
    try:
        return Manifest.of_directory(directory)
    except ValueError as e:
        raise CheckpointError(str(e)) from None


def manifest_hash(directory: str | Path) -> bytes:
    """The identity of a checkpoint directory (reads every byte)."""
    return directory_manifest(directory).hash()


def verify(directory: str | Path, expected: bytes) -> Manifest:
    """The directory's manifest; CheckpointError unless it hashes to `expected`."""
    manifest = directory_manifest(directory)
    got = manifest.hash()
    if got != expected:
        raise CheckpointError(
            f"{directory}: manifest hash {got.hex()[:16]}… is not the expected {expected.hex()[:16]}…"
        )
    return manifest
