"""The little type language of program schemas (every program's `schema.py` imports it).

Every type is fixed-size and naturally aligned with explicit padding, so its C layout *is* its Borsh encoding
(integers little-endian, arrays without length prefix, enums and bools as one byte).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Prim:
    name: str  # IDL name
    c: str
    size: int

    @property
    def align(self) -> int:
        return self.size if self.name != "pubkey" else 1


U8 = Prim("u8", "uint8_t", 1)
U16 = Prim("u16", "uint16_t", 2)
U32 = Prim("u32", "uint32_t", 4)
U64 = Prim("u64", "uint64_t", 8)
I64 = Prim("i64", "int64_t", 8)
F32 = Prim("f32", "uint32_t", 4)  # IEEE-754 bits: the program stores and validates, never computes
BOOL = Prim("bool", "uint8_t", 1)
PUBKEY = Prim("pubkey", "SolPubkey", 32)


@dataclass(frozen=True)
class Array:
    item: object
    length: int | str  # a number or the name of a constant


@dataclass(frozen=True)
class Enum:
    name: str
    variants: tuple[str, ...]
    doc: str = ""


@dataclass(frozen=True)
class Field:
    name: str
    type: object
    doc: str = ""


@dataclass(frozen=True)
class Struct:
    name: str
    fields: tuple[Field, ...]
    doc: str = ""


@dataclass(frozen=True)
class Account:
    name: str
    writable: bool = False
    signer: bool = False
    address: str | None = None
    doc: str = ""


@dataclass(frozen=True)
class Instruction:
    name: str
    accounts: tuple[Account, ...]
    args: Struct | None
    doc: str = ""


@dataclass(frozen=True)
class Error:
    name: str
    msg: str


@dataclass(frozen=True)
class ProgramAbi:
    """What a schema says about its program beyond the types: how its C names are prefixed, what its IDL
    says about it, and the addresses and byte strings its C needs as constants."""

    name: str
    c_prefix: str  # of constants in C: <PREFIX>_MAX_CLIENTS, <PREFIX>_SLOT_HASHES_ID, ...
    description: str
    # the IDL needs an address; the real one is the deployed program's id, which the SDK substitutes
    placeholder_address: str
    version: str = "0.1.0"
    addresses: dict[str, str] = field(default_factory=dict)  # C name (after the prefix) → base58
    byte_constants: dict[str, bytes] = field(default_factory=dict)  # in C (+ _LEN) and in the IDL


def F(name: str, type_: object, doc: str = "") -> Field:
    return Field(name, type_, doc)


def S(name: str, *fields: Field, doc: str = "") -> Struct:
    return Struct(name, tuple(fields), doc)


def Bytes(n: int | str) -> Array:
    return Array(U8, n)
