"""Sizes and offsets of schema types, checked so that the C layout and the Borsh encoding are the same bytes:
every field at its natural alignment, every struct ending on its alignment (padding is written out as `_pad`
fields). Also the names every generator shares: discriminators and C-style upper-case names."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from .loaded import Schema, SchemaError
from .schema import Array, Enum, Field, Prim, Struct


class LayoutError(SchemaError):
    pass


@dataclass(frozen=True)
class Layout:
    fields: tuple[tuple[Field, int], ...]  # each field and its offset
    size: int
    align: int


def size_align(schema: Schema, t: object) -> tuple[int, int]:
    if isinstance(t, Prim):
        return t.size, t.align
    if isinstance(t, Enum):
        return 1, 1
    if isinstance(t, Array):
        size, align = size_align(schema, t.item)
        return size * schema.length(t.length), align
    if isinstance(t, Struct):
        found = layout(schema, t)
        return found.size, found.align
    raise TypeError(t)


def layout(schema: Schema, struct: Struct) -> Layout:
    offset, max_align, out = 0, 1, []
    for f in struct.fields:
        size, align = size_align(schema, f.type)
        if offset % align:
            raise LayoutError(
                f"{struct.name}.{f.name} at offset {offset} is not {align}-aligned; add padding"
            )
        out.append((f, offset))
        offset += size
        max_align = max(max_align, align)
    if offset % max_align:
        raise LayoutError(
            f"{struct.name} is {offset} bytes, not a multiple of {max_align}; add _pad"
        )
    return Layout(tuple(out), offset, max_align)


def discriminator(namespace: str, name: str) -> bytes:
    """Anchor's: the first 8 bytes of sha256("<namespace>:<name>")."""
    return hashlib.sha256(f"{namespace}:{name}".encode()).digest()[:8]


def snake_upper(name: str) -> str:
    return (
        re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name)
        .upper()
        .replace("P2_P", "P2P")
    )


def camel(name: str) -> str:
    """join_run → JoinRun."""
    return "".join(part[:1].upper() + part[1:] for part in name.split("_"))
