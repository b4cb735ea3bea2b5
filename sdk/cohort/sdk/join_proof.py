"""The node key's proof of possession for `join_run`: an Ed25519 signature instruction.

The coordinator binds a wallet's node id (its iroh Ed25519 public key) to the wallet only when the same
transaction carries, before `join_run`, an instruction of the native Ed25519 program that verifies a
signature by that key over `prefix || run || wallet`. The node key is a solders Keypair made from the
node's 32-byte seed (`Keypair.from_seed(seed)`), whose public key is the iroh node id.
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
_OFFSETS = struct.Struct("<7H")  # signature, key and message offsets, each with its instruction index


def join_proof_message(idl: Idl, run: Pubkey, wallet: Pubkey) -> bytes:
    """What the node key signs: the IDL's JOIN_PROOF_PREFIX, the run's address, the wallet."""
    (prefix,) = [c["value"] for c in idl.raw["constants"] if c["name"] == "JOIN_PROOF_PREFIX"]
    return bytes(int(b) for b in prefix.strip("[]").split(",")) + bytes(run) + bytes(wallet)


def ed25519_instruction(key: Keypair, message: bytes) -> Instruction:
    """One signature by `key` over `message`, laid out as [header, offsets, key, signature, message] with
    every offset pointing into this instruction's own data."""
    key_at = _HEADER + _OFFSETS.size
    signature_at = key_at + 32
    message_at = signature_at + 64
    if message_at + len(message) > 0xFFFF:
        raise ValueError(f"an Ed25519 message must fit in 64 KiB, got {len(message)} bytes")
    offsets = _OFFSETS.pack(signature_at, THIS_INSTRUCTION, key_at, THIS_INSTRUCTION, message_at,
                            len(message), THIS_INSTRUCTION)  # fmt: skip
    signature = bytes(key.sign_message(message))
    data = bytes([1, 0]) + offsets + bytes(key.pubkey()) + signature + message
    return Instruction(ED25519_PROGRAM, data, [])


def encode_endpoint(endpoint: str, capacity: int) -> bytes:
    """A node address as the program takes it: printable ASCII, NUL-padded to `capacity` bytes."""
    if any(not 0x20 <= ord(ch) <= 0x7E for ch in endpoint):
        raise ValueError(f"endpoint must be printable ASCII, got {endpoint!r}")
    if len(endpoint) > capacity:
        raise ValueError(f"endpoint is {len(endpoint)} bytes; at most {capacity} fit")
    return endpoint.encode("ascii").ljust(capacity, b"\0")


def decode_endpoint(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("ascii", errors="replace")
