"""The Borsh writers the generated ABI modules call: fixed-size values only (the programs' schemas have no
strings, vectors or options), each checked so a wrong value fails here, naming its field, not on chain."""

from __future__ import annotations

import operator
import struct as _struct
from collections.abc import Callable, Sequence
from enum import IntEnum
from typing import Any, Protocol

from solders.pubkey import Pubkey

from ..idl import IdlError

_INTS = {
    "u8": (_struct.Struct("<B"), 0, 2**8 - 1),
    "u16": (_struct.Struct("<H"), 0, 2**16 - 1),
    "u32": (_struct.Struct("<I"), 0, 2**32 - 1),
    "u64": (_struct.Struct("<Q"), 0, 2**64 - 1),
    "i64": (_struct.Struct("<q"), -(2**63), 2**63 - 1),
}
_F32 = _struct.Struct("<f")


class Encodable(Protocol):
    def encode(self) -> bytes: ...


def _int(kind: str, value: Any, path: str) -> bytes:
    packer, low, high = _INTS[kind]
    try:
        if isinstance(value, bool):
            raise TypeError
        value = operator.index(value)  # an int, or an integer type such as numpy's
    except TypeError:
        raise IdlError(f"{path}: expected an integer for {kind}, got {value!r}") from None
    if not low <= value <= high:
        raise IdlError(f"{path}: {value} does not fit in {kind}")
    return packer.pack(value)


def u8(value: int, path: str) -> bytes:
    return _int("u8", value, path)


def u16(value: int, path: str) -> bytes:
    return _int("u16", value, path)


def u32(value: int, path: str) -> bytes:
    return _int("u32", value, path)


def u64(value: int, path: str) -> bytes:
    return _int("u64", value, path)


def i64(value: int, path: str) -> bytes:
    return _int("i64", value, path)


def f32(value: float, path: str) -> bytes:
    if isinstance(value, (bool, str, bytes)):
        raise IdlError(f"{path}: expected a number, got {value!r}")
    try:
        return _F32.pack(float(value))  # a float, an int, or a number type such as numpy's
    except (TypeError, ValueError):
        raise IdlError(f"{path}: expected a number, got {value!r}") from None
    except OverflowError:
        raise IdlError(f"{path}: {value} does not fit in f32") from None


def boolean(value: bool, path: str) -> bytes:
    if not isinstance(value, bool):
        raise IdlError(f"{path}: expected a bool, got {value!r}")
    return bytes([value])


def pubkey(value: Pubkey, path: str) -> bytes:
    if not isinstance(value, Pubkey):
        raise IdlError(f"{path}: expected a Pubkey, got {type(value).__name__}")
    return bytes(value)


def fixed_bytes(value: bytes | str, n: int, path: str) -> bytes:
    """[u8; n]: bytes (or text, UTF-8), NUL-padded to n."""
    if isinstance(value, str):
        value = value.encode()
    if not isinstance(value, (bytes, bytearray)):
        raise IdlError(f"{path}: expected bytes, got {type(value).__name__}")
    if len(value) > n:
        raise IdlError(f"{path}: {len(value)} bytes do not fit in {n}")
    return bytes(value).ljust(n, b"\0")


def array(values: Sequence[Any], n: int, item: Callable[[Any], bytes], path: str) -> bytes:
    if len(values) != n:
        raise IdlError(f"{path}: expected {n} items, got {len(values)}")
    return b"".join(item(v) for v in values)


def enum(value: IntEnum | int | str, kind: type[IntEnum], path: str) -> bytes:
    """A one-byte enum: a member of `kind`, its index, or its variant's name."""
    try:
        member = kind[value] if isinstance(value, str) else kind(value)
    except (KeyError, ValueError):
        raise IdlError(f"{path}: {value!r} is not a {kind.__name__}") from None
    return bytes([member.value])


def struct(value: Encodable, kind: type, path: str) -> bytes:
    if not isinstance(value, kind):
        raise IdlError(f"{path}: expected a {kind.__name__}, got {type(value).__name__}")
    return value.encode()
