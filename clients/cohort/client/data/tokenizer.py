"""Byte-level tokenizer: 256 tokens, nothing to download or train, lossless on any text."""

from __future__ import annotations

import numpy as np


class ByteTokenizer:
    """UTF-8 bytes as token ids."""

    vocab_size = 256

    def encode(self, text: str) -> np.ndarray:
        return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int64)

    def decode(self, ids: np.ndarray | list[int]) -> str:
        return bytes(int(i) for i in ids).decode("utf-8", errors="replace")
