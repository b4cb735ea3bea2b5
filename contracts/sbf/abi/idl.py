"""The Anchor 0.30+ IDL of a schema (what the SDK, explorers and Anchor clients read)."""

from __future__ import annotations

import json

from .layout import discriminator
from .loaded import Schema
from .schema import Array, Prim, Struct


def _idl_type(schema: Schema, t: object):
    if isinstance(t, Prim):
        return t.name
    if isinstance(t, Array):
        return {"array": [_idl_type(schema, t.item), schema.length(t.length)]}
    return {"defined": {"name": t.name}}


def _idl_fields(schema: Schema, struct: Struct) -> list[dict]:
    out = []
    for f in struct.fields:
        entry: dict = {"name": f.name}
        if f.doc:
            entry["docs"] = [f.doc]
        entry["type"] = _idl_type(schema, f.type)
        out.append(entry)
    return out


def idl(schema: Schema) -> dict:
    instructions = []
    for ix in schema.instructions:
        accounts = []
        for a in ix.accounts:
            entry: dict = {"name": a.name}
            if a.doc:
                entry["docs"] = [a.doc]
            if a.writable:
                entry["writable"] = True
            if a.signer:
                entry["signer"] = True
            if a.address:
                entry["address"] = a.address
            accounts.append(entry)
        item: dict = {"name": ix.name}
        if ix.doc:
            item["docs"] = [ix.doc]
        item["discriminator"] = list(discriminator("global", ix.name))
        item["accounts"] = accounts
        item["args"] = _idl_fields(schema, ix.args) if ix.args else []
        instructions.append(item)
    types = []
    for enum in schema.enums:
        entry = {"name": enum.name}
        if enum.doc:
            entry["docs"] = [enum.doc]
        entry["type"] = {"kind": "enum", "variants": [{"name": v} for v in enum.variants]}
        types.append(entry)
    for struct in schema.structs:
        if struct in schema.arg_types:
            continue  # instruction args are listed inline, as Anchor does
        entry = {"name": struct.name}
        if struct.doc:
            entry["docs"] = [struct.doc]
        entry["serialization"] = "bytemuck" if struct in schema.account_types else "borsh"
        entry["repr"] = {"kind": "c"}
        entry["type"] = {"kind": "struct", "fields": _idl_fields(schema, struct)}
        types.append(entry)
    abi = schema.abi
    return {
        "address": abi.placeholder_address,
        "metadata": {
            "name": abi.name,
            "version": abi.version,
            "spec": "0.1.0",
            "description": abi.description,
        },
        "instructions": instructions,
        "accounts": [
            {"name": a.name, "discriminator": list(discriminator("account", a.name))}
            for a in schema.account_types
        ],
        "events": [
            {"name": e.name, "discriminator": list(discriminator("event", e.name))}
            for e in schema.events
        ],
        "errors": [
            {"code": 6000 + i, "name": e.name, "msg": e.msg} for i, e in enumerate(schema.errors)
        ],
        "types": types,
        "constants": [
            {"name": k, "type": "u64", "value": str(v)} for k, v in schema.constants.items()
        ]
        + [
            {"name": k, "type": "bytes", "value": str(list(v))}
            for k, v in abi.byte_constants.items()
        ],
    }


def idl_text(schema: Schema) -> str:
    return json.dumps(idl(schema), indent=2) + "\n"
