"""The Python side of a schema: a module of typed instruction arguments and accounts.

For each instruction: `<Name>Accounts` (a dataclass naming its accounts; `metas()` lists them in order with
their signer/writable flags, fixed addresses filled in), its arguments' dataclass (the schema's args struct;
`encode()` is its Borsh bytes) and `<name>(program_id, accounts, args)`, the ready instruction. The structs
and enums the arguments use come along; padding fields are not fields (they encode as zeros).
"""

from __future__ import annotations

import json

from .layout import camel, discriminator, layout, size_align
from .loaded import Schema
from .schema import BOOL, F32, PUBKEY, Array, Enum, Instruction, Prim, Struct

_INTS = {"u8", "u16", "u32", "u64", "i64"}


def _used_structs(schema: Schema) -> list[Struct]:
    """The args structs and every struct they contain, in the schema's declaration order."""
    seen: set[str] = set()

    def visit(t: object) -> None:
        while isinstance(t, Array):
            t = t.item
        if isinstance(t, Struct) and t.name not in seen:
            seen.add(t.name)
            for f in t.fields:
                visit(f.type)

    for ix in schema.instructions:
        if ix.args is not None:
            visit(ix.args)
    return [s for s in schema.structs if s.name in seen]


def _used_enums(structs: list[Struct], schema: Schema) -> list[Enum]:
    names = set()
    for s in structs:
        for f in s.fields:
            t = f.type
            while isinstance(t, Array):
                t = t.item
            if isinstance(t, Enum):
                names.add(t.name)
    return [e for e in schema.enums if e.name in names]


def _str(text: str) -> str:
    """A Python string literal (double-quoted, as the code base writes them)."""
    return json.dumps(text)


def _doc(text: str) -> str:
    """Text safe inside a triple-quoted docstring."""
    text = text.replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    return text + " " if text.endswith('"') else text


def _address_names(schema: Schema) -> dict[str, str]:
    """A module constant per fixed account address: <ACCOUNT>_ADDRESS (a dataclass default must not be a
    call)."""
    names: dict[str, str] = {}
    for ix in schema.instructions:
        for a in ix.accounts:
            if a.address and a.address not in names:
                name = f"{a.name.upper()}_ADDRESS"
                while name in names.values():
                    name = "_" + name
                names[a.address] = name
    return names


def _py_type(t: object) -> str:
    if isinstance(t, Prim):
        if t is F32:
            return "float"
        if t is BOOL:
            return "bool"
        if t is PUBKEY:
            return "Pubkey"
        return "int"
    if isinstance(t, Array):
        if isinstance(t.item, Prim) and t.item.name == "u8":
            return "bytes"
        return f"Sequence[{_py_type(t.item)}]"
    if isinstance(t, Enum):
        return f"{t.name} | int | str"
    return t.name  # a struct


def _encoder(schema: Schema, t: object, value: str, path: str) -> str:
    """A Python expression encoding `value` (an expression) of schema type `t`."""
    if isinstance(t, Prim):
        if t.name in _INTS:
            return f"_e.{t.name}({value}, {_str(path)})"
        if t is F32:
            return f"_e.f32({value}, {_str(path)})"
        if t is BOOL:
            return f"_e.boolean({value}, {_str(path)})"
        return f"_e.pubkey({value}, {_str(path)})"
    if isinstance(t, Array):
        n = schema.length(t.length)
        if isinstance(t.item, Prim) and t.item.name == "u8":
            return f"_e.fixed_bytes({value}, {n}, {_str(path)})"
        item = _encoder(schema, t.item, "v", f"{path}[]")
        return f"_e.array({value}, {n}, lambda v: {item}, {_str(path)})"
    if isinstance(t, Enum):
        return f"_e.enum({value}, {t.name}, {_str(path)})"
    return f"_e.struct({value}, {t.name}, {_str(path)})"


def _struct_class(schema: Schema, struct: Struct) -> list[str]:
    found = layout(schema, struct)
    lines = ["", "", "@dataclass(frozen=True, kw_only=True)", f"class {struct.name}:"]
    if struct.doc:
        lines.append(f'    """{_doc(struct.doc)}"""')
        lines.append("")
    fields = [(f, off) for f, off in found.fields if not f.name.startswith("_")]
    for f, _ in fields:
        comment = f"  # {f.doc}" if f.doc else ""
        lines.append(f"    {f.name}: {_py_type(f.type)}{comment}")
    if fields:
        lines.append("")
    lines.append(f"    SIZE: ClassVar[int] = {found.size}")
    lines.append("")
    lines.append("    def encode(self) -> bytes:")
    parts = []
    for f, _ in found.fields:
        if f.name.startswith("_"):
            parts.append(f"bytes({size_align(schema, f.type)[0]})")
        else:
            parts.append(_encoder(schema, f.type, f"self.{f.name}", f"{struct.name}.{f.name}"))
    if not parts:
        lines.append('        return b""')
    else:
        lines += ['        return b"".join(', "            ("]
        lines += [f"                {p}," for p in parts]
        lines += ["            )", "        )"]
    return lines


def _accounts_class(ix: Instruction, addresses: dict[str, str]) -> list[str]:
    name = f"{camel(ix.name)}Accounts"
    lines = ["", "", "@dataclass(frozen=True, kw_only=True)", f"class {name}:"]
    lines.append(f'    """The accounts of `{ix.name}`, in order."""')
    lines.append("")
    for a in ix.accounts:
        flags = ", ".join(x for x, on in (("signer", a.signer), ("writable", a.writable)) if on)
        comment = f"  # {flags}" if flags else ""
        if a.address:
            lines.append(f"    {a.name}: Pubkey = {addresses[a.address]}{comment}")
        else:
            lines.append(f"    {a.name}: Pubkey{comment}")
    lines.append("")
    lines.append("    def metas(self) -> list[AccountMeta]:")
    lines.append("        return [")
    for a in ix.accounts:
        lines.append(f"            AccountMeta(self.{a.name}, {a.signer}, {a.writable}),")
    lines.append("        ]")
    return lines


def _instruction_function(ix: Instruction) -> list[str]:
    accounts = f"{camel(ix.name)}Accounts"
    d = discriminator("global", ix.name)
    constant = f"{ix.name.upper()}_DISCRIMINATOR"
    lines = ["", "", f"{constant} = bytes.fromhex({_str(d.hex())})", "", ""]
    if ix.args is None:
        lines.append(f"def {ix.name}(program_id: Pubkey, accounts: {accounts}) -> Instruction:")
        body = constant
    else:
        lines.append(
            f"def {ix.name}(program_id: Pubkey, accounts: {accounts}, args: {ix.args.name}) -> Instruction:"
        )
        body = f"{constant} + args.encode()"
    if ix.doc:
        lines.append(f'    """{_doc(ix.doc)}"""')
    lines.append(f"    return Instruction(program_id, {body}, accounts.metas())")
    return lines


def _uses_sequences(structs: list[Struct]) -> bool:
    return any(_py_type(f.type).startswith("Sequence[") for s in structs for f in s.fields)


def python_module(schema: Schema, generated_by: str) -> str:
    structs = _used_structs(schema)
    enums = _used_enums(structs, schema)
    addresses = _address_names(schema)
    imports = ["from __future__ import annotations", ""]
    if _uses_sequences(structs):
        imports.append("from collections.abc import Sequence")
    imports.append("from dataclasses import dataclass")
    if enums:
        imports.append("from enum import IntEnum")
    if structs:
        imports.append("from typing import ClassVar")
    imports += ["", "from solders.instruction import AccountMeta, Instruction",
                "from solders.pubkey import Pubkey", ""]  # fmt: skip
    if structs:
        imports.append("from cohort.sdk.abi import encoding as _e")
    lines = [
        f'"""GENERATED by {generated_by} from {schema.path.name}. Do not edit.',
        "",
        f"The {schema.abi.name} program's instructions, typed: each one's accounts (`<Name>Accounts`), its",
        "arguments (a dataclass whose `encode()` is their Borsh bytes) and `<name>(program_id, accounts, args)`.",
        '"""',
        "",
        *imports,
        "",
        f"PROGRAM = {_str(schema.abi.name)}",
        "",
    ]
    for name, value in schema.constants.items():
        lines.append(f"{name} = {value}")
    if addresses:
        lines.append("")
    for address, name in addresses.items():
        lines.append(f"{name} = Pubkey.from_string({_str(address)})")
    for enum in enums:
        lines += ["", "", f"class {enum.name}(IntEnum):"]
        if enum.doc:
            lines += [f'    """{_doc(enum.doc)}"""', ""]
        lines += [f"    {v} = {i}" for i, v in enumerate(enum.variants)]
    for struct in structs:
        lines += _struct_class(schema, struct)
    for ix in schema.instructions:
        lines += _accounts_class(ix, addresses)
        lines += _instruction_function(ix)
    return "\n".join(lines) + "\n"
