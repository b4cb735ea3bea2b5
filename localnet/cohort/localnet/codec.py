"""Base58 and base64 as the RPC uses them (solders covers only fixed-size keys and signatures)."""

from __future__ import annotations

import base64
import binascii

_ALPHABET = b"123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
_INDEX = {c: i for i, c in enumerate(_ALPHABET)}


def b58encode(data: bytes) -> str:
    zeros = len(data) - len(data.lstrip(b"\0"))
    n = int.from_bytes(data, "big")
    out = bytearray()
    while n:
        n, r = divmod(n, 58)
        out.append(_ALPHABET[r])
    return ("1" * zeros) + out[::-1].decode("ascii")


def b58decode(text: str) -> bytes:
    """Decode base58; raises ValueError naming the offending character."""
    raw = text.encode("ascii", "replace")
    n = 0
    for c in raw:
        digit = _INDEX.get(c)
        if digit is None:
            raise ValueError(f"invalid base58 character {chr(c)!r}")
        n = n * 58 + digit
    zeros = len(raw) - len(raw.lstrip(b"1"))
    body = n.to_bytes((n.bit_length() + 7) // 8, "big") if n else b""
    return b"\0" * zeros + body


def b64encode(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def b64decode(text: str) -> bytes:
    """Strict base64; raises ValueError on anything else."""
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error as exc:
        raise ValueError(f"invalid base64: {exc}") from None
