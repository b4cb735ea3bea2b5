"""Node identity: an Ed25519 key pair whose public half is the node id peers authenticate.

A client registers its node id on chain beside its wallet. The key either lives in a key file or is
derived from the wallet secret and the run id, so a restarted client keeps the same node id without
storing anything new. The same key signs gossip announcements.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from iroh import EndpointId, IrohError, SecretKey, Signature

NODE_ID_BYTES = 32
SECRET_KEY_BYTES = 32
SIGNATURE_BYTES = 64
_DERIVATION_TAG = b"cohort/p2p-identity/v1"


@dataclass(frozen=True, order=True)
class NodeId:
    """A node's Ed25519 public key (32 bytes); printed as 64 hex characters."""

    key: bytes

    def __post_init__(self) -> None:
        if not isinstance(self.key, bytes) or len(self.key) != NODE_ID_BYTES:
            raise ValueError(f"a node id is {NODE_ID_BYTES} bytes, got {self.key!r:.80}")

    @classmethod
    def from_hex(cls, text: str) -> NodeId:
        try:
            raw = bytes.fromhex(text)
        except (ValueError, TypeError) as e:
            raise ValueError(f"a node id is 64 hex characters, got {text!r:.80}") from e
        return cls(raw)

    def hex(self) -> str:
        return self.key.hex()

    def short(self) -> str:
        return self.key.hex()[:10]

    def verify(self, message: bytes, signature: bytes) -> bool:
        """True if `signature` is this node's Ed25519 signature of `message`."""
        if len(signature) != SIGNATURE_BYTES:
            return False
        try:
            EndpointId.from_bytes(self.key).verify(message, Signature.from_bytes(signature))
        except IrohError:
            return False
        return True

    def __str__(self) -> str:
        return self.hex()

    def __repr__(self) -> str:
        return f"NodeId({self.short()}…)"


class NodeKey:
    """A node's secret key (32-byte Ed25519 seed) with its public node id."""

    def __init__(self, secret: bytes) -> None:
        if not isinstance(secret, bytes) or len(secret) != SECRET_KEY_BYTES:
            raise ValueError(f"a node secret key is {SECRET_KEY_BYTES} bytes")
        self._secret = SecretKey.from_bytes(secret)
        self.secret = secret
        self.node_id = NodeId(self._secret.public().to_bytes())

    @classmethod
    def generate(cls) -> NodeKey:
        return cls(os.urandom(SECRET_KEY_BYTES))

    @classmethod
    def derive(cls, wallet_secret: bytes, run_id: str | bytes) -> NodeKey:
        """The node key of this wallet in this run: stable across restarts, different per run.

        `wallet_secret` is a Solana keypair secret: the 64 bytes solana-keygen stores (seed then
        public key) or the 32-byte seed alone.
        """
        seed = _wallet_seed(wallet_secret)
        run = run_id.encode() if isinstance(run_id, str) else run_id
        if not isinstance(run, bytes) or not run:
            raise ValueError("run_id must be a non-empty string or bytes")
        material = _DERIVATION_TAG + len(run).to_bytes(4, "big") + run + seed
        return cls(hashlib.sha256(material).digest())

    @classmethod
    def from_file(cls, path: str | Path) -> NodeKey:
        """Load a key file: 64 hex characters (what `save` writes) or 32 raw bytes."""
        raw = Path(path).read_bytes()
        if len(raw) == SECRET_KEY_BYTES:
            return cls(raw)
        text = raw.decode("ascii", errors="replace").strip()
        try:
            secret = bytes.fromhex(text)
        except ValueError:
            secret = b""
        if len(secret) != SECRET_KEY_BYTES:
            raise ValueError(
                f"{path}: a node key file holds {SECRET_KEY_BYTES} raw bytes or "
                f"{2 * SECRET_KEY_BYTES} hex characters"
            )
        return cls(secret)

    def save(self, path: str | Path) -> None:
        """Write the key as hex, readable by the owner only; refuses to overwrite a file."""
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(self.secret.hex() + "\n")

    def sign(self, message: bytes) -> bytes:
        return self._secret.sign(message).to_bytes()

    def __repr__(self) -> str:
        return f"NodeKey({self.node_id.short()}…)"


def _wallet_seed(wallet_secret: bytes) -> bytes:
    if not isinstance(wallet_secret, bytes | bytearray):
        raise TypeError("wallet_secret must be bytes (the keypair secret, not a file name)")
    secret = bytes(wallet_secret)
    if len(secret) == 32:
        return secret
    if len(secret) == 64:
        seed, public = secret[:32], secret[32:]
        if SecretKey.from_bytes(seed).public().to_bytes() != public:
            raise ValueError(
                "wallet secret is inconsistent: its last 32 bytes are not the public key of its first 32"
            )
        return seed
    raise ValueError(
        f"a wallet secret is 64 bytes (seed + public key) or a 32-byte seed, got {len(secret)}"
    )
