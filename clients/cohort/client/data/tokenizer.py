"""Tokenizers: BPE through the `tokenizers` library (trained offline or loaded from any
tokenizer.json), and the byte-level one (256 tokens, nothing to train) as the fallback.

Every tokenizer here has `vocab_size`, `encode`, `decode`, `eos_id` (the document separator, None
for bytes) and `save(directory)`, which writes the files a Hugging Face checkpoint carries.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

import numpy as np

EOS = "<|endoftext|>"
TOKENIZER_FILE = "tokenizer.json"
MAX_TOKENIZER_BYTES = 64 << 20


class VocabMismatch(ValueError):
    """The tokenizer's vocabulary is not the run's."""


class Tokenizer(Protocol):
    vocab_size: int
    eos_id: int | None

    def encode(self, text: str) -> np.ndarray: ...

    def decode(self, ids: np.ndarray | list[int]) -> str: ...

    def save(self, directory: Path) -> None: ...


class ByteTokenizer:
    """UTF-8 bytes as token ids."""

    vocab_size = 256
    eos_id = None

    def encode(self, text: str) -> np.ndarray:
        return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int64)

    def decode(self, ids: np.ndarray | list[int]) -> str:
        return bytes(int(i) for i in ids).decode("utf-8", errors="replace")

    def save(self, directory: Path) -> None:
        """Nothing to write: bytes need no vocabulary file."""


class BpeTokenizer:
    """A `tokenizers.Tokenizer` (byte-level BPE when trained here)."""

    def __init__(self, tokenizer) -> None:
        self.inner = tokenizer
        self.vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
        self.eos_id = tokenizer.token_to_id(EOS)

    @classmethod
    def from_file(cls, path: str | Path) -> BpeTokenizer:
        from tokenizers import Tokenizer as HfTokenizer

        path = Path(path)
        if path.is_dir():
            path = path / TOKENIZER_FILE
        try:
            if path.stat().st_size > MAX_TOKENIZER_BYTES:
                raise ValueError(f"{path} is larger than {MAX_TOKENIZER_BYTES >> 20} MiB")
            return cls(HfTokenizer.from_file(str(path)))
        except OSError as e:
            raise ValueError(f"cannot read tokenizer {path}: {e.strerror or e}") from None
        except Exception as e:  # the Rust side raises plain Exceptions for bad JSON
            raise ValueError(f"{path} is not a tokenizer.json: {e}") from None

    def encode(self, text: str) -> np.ndarray:
        return np.asarray(self.inner.encode(text).ids, dtype=np.int64)

    def encode_many(self, texts: list[str]) -> list[np.ndarray]:
        return [np.asarray(e.ids, dtype=np.int64) for e in self.inner.encode_batch(texts)]

    def decode(self, ids: np.ndarray | list[int]) -> str:
        return self.inner.decode([int(i) for i in ids], skip_special_tokens=False)

    def save(self, directory: Path) -> None:
        """tokenizer.json + a tokenizer_config.json, so `AutoTokenizer.from_pretrained` loads it."""
        directory = Path(directory)
        self.inner.save(str(directory / TOKENIZER_FILE))
        config = {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "clean_up_tokenization_spaces": False,
        }
        if self.eos_id is not None:
            config.update(eos_token=EOS, bos_token=EOS, unk_token=EOS)
        (directory / "tokenizer_config.json").write_text(json.dumps(config, indent=1) + "\n")


def train_bpe(texts: Iterable[str], vocab_size: int, *, min_frequency: int = 2) -> BpeTokenizer:
    """A byte-level BPE of exactly `vocab_size` tokens (EOS included) trained on `texts`."""
    from tokenizers import Tokenizer as HfTokenizer
    from tokenizers import decoders, models, pre_tokenizers, trainers

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    if vocab_size < len(alphabet) + 1:
        raise ValueError(
            f"a byte-level BPE needs vocab_size >= {len(alphabet) + 1}, got {vocab_size}"
        )
    tokenizer = HfTokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=[EOS],
        initial_alphabet=alphabet,
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    trained = BpeTokenizer(tokenizer)
    if trained.vocab_size != vocab_size:
        raise ValueError(
            f"the text yields only {trained.vocab_size} tokens, fewer than vocab_size {vocab_size}: "
            "use more text or a smaller vocabulary"
        )
    return trained


def load_tokenizer(spec: str | Path) -> Tokenizer:
    """ "byte" for the byte-level tokenizer, else a tokenizer.json (or a directory holding one)."""
    if str(spec) == "byte":
        return ByteTokenizer()
    return BpeTokenizer.from_file(spec)


def check_vocab(tokenizer: Tokenizer, vocab_size: int) -> None:
    """Refuse a tokenizer whose vocabulary is not the run's `vocab_size`."""
    if tokenizer.vocab_size != vocab_size:
        raise VocabMismatch(
            f"the tokenizer has {tokenizer.vocab_size} tokens but the run's vocab_size is {vocab_size}"
        )
