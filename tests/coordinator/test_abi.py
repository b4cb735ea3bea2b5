"""The ABI files are generated from contracts/coordinator/schema.py and stay in sync with it, and
idl.json has the shape of an Anchor 0.30+ IDL (what Anchor clients and explorers read)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

from cohort.sdk.coordinator_core import COORDINATOR_DIR, IDL_PATH

PRIMITIVES = {"bool", "u8", "i8", "u16", "i16", "u32", "i32", "u64", "i64", "u128", "i128", "f32",
              "f64", "pubkey", "string", "bytes"}  # fmt: skip


def test_generated_files_are_in_sync_with_the_schema():
    result = subprocess.run(
        [sys.executable, str(COORDINATOR_DIR / "codegen.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def discriminator(namespace: str, name: str) -> list[int]:
    return list(hashlib.sha256(f"{namespace}:{name}".encode()).digest()[:8])


def referenced_types(type_) -> list[str]:
    """Names of the defined types a type expression refers to; fails on anything not Anchor 0.30."""
    if isinstance(type_, str):
        assert type_ in PRIMITIVES, type_
        return []
    (kind,) = type_.keys()
    if kind == "defined":
        return [type_["defined"]["name"]]
    if kind == "array":
        item, length = type_["array"]
        assert isinstance(length, int) and length > 0
        return referenced_types(item)
    assert kind in ("vec", "option"), kind
    return referenced_types(type_[kind])


def test_idl_has_the_anchor_0_30_shape():
    idl = json.loads(IDL_PATH.read_text())
    assert set(idl) >= {
        "address",
        "metadata",
        "instructions",
        "accounts",
        "events",
        "errors",
        "types",
    }
    assert {"name", "version", "spec"} <= set(idl["metadata"])
    types = {t["name"]: t["type"] for t in idl["types"]}
    assert len(types) == len(idl["types"]), "a type is defined twice"
    used = []

    names = [ix["name"] for ix in idl["instructions"]]
    assert len(set(names)) == len(names)
    for ix in idl["instructions"]:
        assert ix["discriminator"] == discriminator("global", ix["name"]), ix["name"]
        assert isinstance(ix["accounts"], list) and ix["accounts"], ix["name"]
        for account in ix["accounts"]:
            assert set(account) <= {
                "name",
                "docs",
                "writable",
                "signer",
                "address",
                "optional",
                "pda",
            }
            assert all(
                isinstance(account.get(flag, False), bool) for flag in ("writable", "signer")
            )
        assert isinstance(ix["args"], list), ix["name"]
        for arg in ix["args"]:
            used += referenced_types(arg["type"])

    for section, namespace in (("accounts", "account"), ("events", "event")):
        for item in idl[section]:
            assert item["discriminator"] == discriminator(namespace, item["name"]), item["name"]
            assert types[item["name"]]["kind"] == "struct", item["name"]
    discriminators = [bytes(x["discriminator"]) for s in ("accounts", "events") for x in idl[s]]
    assert len(set(discriminators)) == len(discriminators)

    for name, body in types.items():
        if body["kind"] == "struct":
            for field in body["fields"]:
                used += referenced_types(field["type"])
        else:
            assert body["kind"] == "enum", name
            assert body["variants"] and all("name" in v for v in body["variants"])
    missing = set(used) - set(types)
    assert not missing, f"referenced but not defined: {sorted(missing)}"

    codes = [e["code"] for e in idl["errors"]]
    assert codes == list(range(6000, 6000 + len(codes)))
    assert all(e["name"] and e["msg"] for e in idl["errors"])
