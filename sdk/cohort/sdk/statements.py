"""Statements signed by node keys, for the coordinator to check through the native Ed25519 program.

`join_run` binds a wallet's node id (its iroh Ed25519 public key) to the wallet only when the same
transaction carries, before it, an Ed25519 program instruction verifying a signature by that key over
`JOIN_PROOF_PREFIX || run || wallet || join marker` (the run's `next_active`, so a proof is good for one
joining window). Trainers sign `RESULT_PROOF_PREFIX || run || epoch || step || batch || commitment` for every
result they publish; two such statements for one epoch and step with different commitments are an
equivocation proof anyone can submit (`report_equivocation`). The epoch is the number the chain gave the
epoch when it started (`Run.epoch_number`); it never repeats, so an authority that rewinds the run's step
cannot pair an honest member's old statement with its new one. The node key is a solders Keypair made from the node's 32-byte
seed (`Keypair.from_seed(seed)`), whose public key is the iroh node id.
"""

from __future__ import annotations

import struct

from solders.instruction import Instruction
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from .idl import Idl

ED25519_PROGRAM = Pubkey.from_string("Ed25519SigVerify111111111111111111111111111")
THIS_INSTRUCTION = 0xFFFF  # an offset's instruction index meaning "the Ed25519 instruction itself"
_HEADER = 2  # u8 signature count, u8 padding
_OFFSETS = struct.Struct(
    "<7H"
)  # signature, key and message offsets, each with its instruction index
_RESULT = struct.Struct("<IIQQ32s")  # epoch, step, batch start, batch end, commitment


def _prefix(idl: Idl, name: str) -> bytes:
    (value,) = [c["value"] for c in idl.raw["constants"] if c["name"] == name]
    return bytes(int(b) for b in value.strip("[]").split(","))


def join_proof_message(idl: Idl, run: Pubkey, wallet: Pubkey, join_marker: int) -> bytes:
    """What the node key signs to join: JOIN_PROOF_PREFIX, the run's address, the wallet, the join marker."""
    return (
        _prefix(idl, "JOIN_PROOF_PREFIX")
        + bytes(run)
        + bytes(wallet)
        + struct.pack("<Q", join_marker)
    )


def result_statement(
    idl: Idl, run: Pubkey, epoch: int, step: int, batch: tuple[int, int], commitment: bytes
) -> bytes:
    """What a trainer's node key signs for its result of `step` of epoch `epoch`: the batch it trained and
    the payload's sha256."""
    if len(commitment) != 32:
        raise ValueError(f"a commitment is 32 bytes, got {len(commitment)}")
    packed = _RESULT.pack(epoch, step, batch[0], batch[1], commitment)
    return _prefix(idl, "RESULT_PROOF_PREFIX") + bytes(run) + packed


def ed25519_verify_instruction(public_key: bytes, signature: bytes, message: bytes) -> Instruction:
    """An Ed25519 program instruction checking one signature, laid out as [header, offsets, key, signature,
    message] with every offset pointing into this instruction's own data."""
    if len(public_key) != 32 or len(signature) != 64:
        raise ValueError("an Ed25519 public key is 32 bytes and a signature 64")
    key_at = _HEADER + _OFFSETS.size
    signature_at = key_at + 32
    message_at = signature_at + 64
    if message_at + len(message) > 0xFFFF:
        raise ValueError(f"an Ed25519 message must fit in 64 KiB, got {len(message)} bytes")
    offsets = _OFFSETS.pack(signature_at, THIS_INSTRUCTION, key_at, THIS_INSTRUCTION, message_at,
                            len(message), THIS_INSTRUCTION)  # fmt: skip
    data = bytes([1, 0]) + offsets + bytes(public_key) + bytes(signature) + message
    return Instruction(ED25519_PROGRAM, data, [])


def ed25519_instruction(key: Keypair, message: bytes) -> Instruction:
    """The Ed25519 program instruction for `key`'s own signature over `message`."""
    return ed25519_verify_instruction(
        bytes(key.pubkey()), bytes(key.sign_message(message)), message
    )


def encode_endpoint(endpoint: str, capacity: int) -> bytes:
    """A node address as the program takes it: printable ASCII, NUL-padded to `capacity` bytes."""
    if any(not 0x20 <= ord(ch) <= 0x7E for ch in endpoint):
        raise ValueError(f"endpoint must be printable ASCII, got {endpoint!r}")
    if len(endpoint) > capacity:
        raise ValueError(f"endpoint is {len(endpoint)} bytes; at most {capacity} fit")
    return endpoint.encode("ascii").ljust(capacity, b"\0")


def decode_endpoint(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("ascii", errors="replace")
