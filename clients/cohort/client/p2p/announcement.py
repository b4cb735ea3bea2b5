"""Gossip announcements: small messages signed by their origin's node key.

    u8 version | origin (32) | u64 round | u32 seq | u16 payload length | payload | signature (64)

The signature covers a domain tag, the run's gossip topic and everything before it, so an
announcement cannot be replayed into another run. Its id is the sha256 of the signed part, so a
re-encoded signature does not make a "new" message. A whole announcement is at most 4096 bytes.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from functools import cached_property

from .identity import NODE_ID_BYTES, SIGNATURE_BYTES, NodeId, NodeKey

VERSION = 1
MAX_ANNOUNCEMENT = 4096
_HEAD = struct.Struct(">B32sQIH")
MAX_PAYLOAD = MAX_ANNOUNCEMENT - _HEAD.size - SIGNATURE_BYTES
_SIGNING_TAG = b"cohort/gossip/v1"
TOPIC_BYTES = 32


def gossip_topic(run_id: str | bytes) -> bytes:
    """The topic every node of a run signs into its announcements."""
    run = run_id.encode() if isinstance(run_id, str) else run_id
    if not run:
        raise ValueError("run_id must not be empty")
    return hashlib.sha256(b"cohort gossip" + run).digest()


@dataclass(frozen=True)
class Announcement:
    origin: NodeId
    round: int
    seq: int
    payload: bytes
    signature: bytes

    @classmethod
    def create(
        cls, key: NodeKey, topic: bytes, round: int, seq: int, payload: bytes
    ) -> Announcement:
        _check_fields(topic, round, seq, payload)
        head = _HEAD.pack(VERSION, key.node_id.key, round, seq, len(payload))
        signature = key.sign(_SIGNING_TAG + topic + head + payload)
        return cls(key.node_id, round, seq, payload, signature)

    def encode(self) -> bytes:
        return self._signed_part + self.signature

    @classmethod
    def decode(cls, data: bytes) -> Announcement:
        """Parse wire bytes; raises ValueError saying what is wrong (the signature is not checked)."""
        if len(data) > MAX_ANNOUNCEMENT:
            raise ValueError(f"announcement of {len(data)} bytes exceeds {MAX_ANNOUNCEMENT}")
        if len(data) < _HEAD.size + SIGNATURE_BYTES:
            raise ValueError(f"announcement of {len(data)} bytes is shorter than its header")
        version, origin, round, seq, length = _HEAD.unpack_from(data)
        if version != VERSION:
            raise ValueError(f"unknown announcement version {version}")
        if len(data) != _HEAD.size + length + SIGNATURE_BYTES:
            raise ValueError(
                f"payload length says {length}, message carries {len(data) - _HEAD.size - SIGNATURE_BYTES}"
            )
        payload = data[_HEAD.size : _HEAD.size + length]
        return cls(NodeId(origin), round, seq, payload, data[-SIGNATURE_BYTES:])

    def verify(self, topic: bytes) -> bool:
        """True if the origin signed this announcement for `topic`."""
        return self.origin.verify(_SIGNING_TAG + topic + self._signed_part, self.signature)

    @property
    def size(self) -> int:
        """Bytes on the wire (what holding or forwarding it costs)."""
        return _HEAD.size + len(self.payload) + SIGNATURE_BYTES

    @cached_property
    def id(self) -> bytes:
        return hashlib.sha256(self._signed_part).digest()

    @cached_property
    def _signed_part(self) -> bytes:
        return (
            _HEAD.pack(VERSION, self.origin.key, self.round, self.seq, len(self.payload))
            + self.payload
        )

    def __repr__(self) -> str:
        return (
            f"Announcement({self.origin.short()} r{self.round} #{self.seq}, {len(self.payload)} B)"
        )


def _check_fields(topic: bytes, round: int, seq: int, payload: bytes) -> None:
    if not isinstance(topic, bytes) or len(topic) != TOPIC_BYTES:
        raise ValueError(f"topic is {TOPIC_BYTES} bytes (see gossip_topic)")
    if not isinstance(round, int) or not 0 <= round < 1 << 64:
        raise ValueError(f"round must fit in u64, got {round!r}")
    if not isinstance(seq, int) or not 0 <= seq < 1 << 32:
        raise ValueError(f"seq must fit in u32, got {seq!r}")
    if not isinstance(payload, bytes):
        raise TypeError("payload must be bytes")
    if len(payload) > MAX_PAYLOAD:
        raise ValueError(f"payload of {len(payload)} bytes exceeds {MAX_PAYLOAD}")


assert _HEAD.size == 1 + NODE_ID_BYTES + 8 + 4 + 2
