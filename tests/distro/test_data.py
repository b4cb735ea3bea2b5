import math

import numpy as np
import pytest
import torch

from cohort.client.data import (
    ByteTokenizer,
    TokenDataset,
    kjv_text,
    load_corpus,
    pydoc_text,
    split_batch,
)
from cohort.client.distro import BatchId


def test_kjv_corpus_is_real_text_without_verse_numbers():
    text = kjv_text()
    assert len(text) > 4_000_000
    assert text.startswith("In the beginning God created")
    assert "1:1" not in text[:1000]


def test_pydoc_corpus_and_names():
    assert len(pydoc_text()) > 100_000
    assert load_corpus("pydoc") is pydoc_text()
    with pytest.raises(ValueError, match="unknown corpus 'nope'"):
        load_corpus("nope")


def test_byte_tokenizer_round_trip():
    tok = ByteTokenizer()
    ids = tok.encode("And God said, ’Let there be light’")
    assert ids.dtype == np.int64 and int(ids.max()) < tok.vocab_size
    assert tok.decode(ids) == "And God said, ’Let there be light’"


def test_split_batch_like_psyche():
    assert split_batch(10, 10, 3) == [BatchId(10, 14), BatchId(14, 17), BatchId(17, 20)]
    with pytest.raises(ValueError, match="cannot be split"):
        split_batch(0, 2, 3)


def test_dataset_is_deterministic_and_holds_out_the_tail():
    tokens = np.arange(10_000) % 256
    a = TokenDataset(tokens, seq_len=50, heldout_fraction=0.1, seed=3)
    b = TokenDataset(tokens, seq_len=50, heldout_fraction=0.1, seed=3)
    assert len(a.train) == 180 and len(a.heldout) == 20
    assert torch.equal(a.sequences(BatchId(0, 8)), b.sequences(BatchId(0, 8)))
    # a global batch equals its shards put together
    whole = a.sequences(BatchId(0, 10))
    parts = torch.cat([a.sequences(s) for s in split_batch(0, 10, 4)])
    assert torch.equal(whole, parts)
    # held-out sequences come from after every training sequence
    assert int(a.heldout[0, 0]) == (180 * 50) % 256
    assert len(a.heldout_batches(8)) == 3 and len(a.heldout_batches(8, max_sequences=8)) == 1


def test_unigram_baseline():
    ds = TokenDataset(ByteTokenizer().encode(pydoc_text()), seq_len=128)
    loss = ds.unigram_loss(256)
    assert 2.0 < loss < math.log(256)
    with pytest.raises(ValueError, match="too few"):
        TokenDataset(np.arange(10), seq_len=8)
