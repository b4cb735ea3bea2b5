"""Node identity: key files, derivation from a wallet secret, signatures."""

from __future__ import annotations

import pytest
from solders.keypair import Keypair

from cohort.client.p2p import NodeId, NodeKey


def test_derived_key_is_stable_per_wallet_and_run():
    wallet = Keypair().to_bytes()  # 64 bytes as solana-keygen stores them: seed then public key
    a = NodeKey.derive(wallet, "run-a")
    assert NodeKey.derive(wallet, "run-a").node_id == a.node_id  # a restart keeps the id
    assert NodeKey.derive(wallet[:32], "run-a").node_id == a.node_id  # the seed alone is enough
    assert NodeKey.derive(wallet, b"run-a").node_id == a.node_id
    assert NodeKey.derive(wallet, "run-b").node_id != a.node_id
    assert NodeKey.derive(Keypair().to_bytes(), "run-a").node_id != a.node_id
    assert a.node_id.key != wallet[32:]  # not the wallet key itself


def test_wallet_secret_is_checked():
    wallet = bytearray(Keypair().to_bytes())
    wallet[40] ^= 1
    with pytest.raises(ValueError, match="inconsistent"):
        NodeKey.derive(bytes(wallet), "run")
    with pytest.raises(ValueError, match="64 bytes"):
        NodeKey.derive(b"x" * 33, "run")
    with pytest.raises(TypeError, match="bytes"):
        NodeKey.derive("id.json", "run")
    with pytest.raises(ValueError, match="run_id"):
        NodeKey.derive(b"x" * 32, "")


def test_key_file_round_trip(tmp_path):
    key = NodeKey.generate()
    key.save(tmp_path / "node.key")
    assert (tmp_path / "node.key").stat().st_mode & 0o777 == 0o600
    assert NodeKey.from_file(tmp_path / "node.key").node_id == key.node_id
    with pytest.raises(FileExistsError):
        key.save(tmp_path / "node.key")
    (tmp_path / "raw.key").write_bytes(key.secret)
    assert NodeKey.from_file(tmp_path / "raw.key").node_id == key.node_id
    (tmp_path / "bad.key").write_text("not a key\n")
    with pytest.raises(ValueError, match="64 hex characters"):
        NodeKey.from_file(tmp_path / "bad.key")


def test_signatures():
    key = NodeKey.generate()
    sig = key.sign(b"hello")
    assert key.node_id.verify(b"hello", sig)
    assert not key.node_id.verify(b"hellp", sig)
    assert not key.node_id.verify(b"hello", sig[:-1])
    assert not NodeKey.generate().node_id.verify(b"hello", sig)


def test_node_id_parsing():
    key = NodeKey.generate()
    assert NodeId.from_hex(key.node_id.hex()) == key.node_id
    with pytest.raises(ValueError, match="64 hex"):
        NodeId.from_hex("zz")
    with pytest.raises(ValueError, match="32 bytes"):
        NodeId(b"short")
    with pytest.raises(ValueError, match="32 bytes"):
        NodeKey(b"short")
