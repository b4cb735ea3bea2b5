"""From one `getTransaction` answer to what the explorer stores: the coordinator instructions it ran (by IDL
name, with the run they touched) and the events the coordinator itself logged. Pure: no I/O.

Events are decoded generically with the IDL coder, so fields a newer program adds simply appear. Only
`Program data:` lines logged while the coordinator is the executing program count (`Idl.events_in_logs`):
another program could log bytes that look like our events, and a failed transaction's events never happened.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

from solders.pubkey import Pubkey
from solders.transaction import VersionedTransaction

from ..idl import Idl, IdlError
from ..idl_account import IDL_IX_TAG

LOADER_V3 = "BPFLoaderUpgradeab1e11111111111111111111111"
_HEX_FIELDS = ("sha256", "root", "participants", "mask", "hash", "manifest", "commitment", "vote")


@dataclass(frozen=True)
class DecodedInstruction:
    name: str  # the IDL name, "loader:<what>" for deploys/upgrades of the program, "unknown" otherwise
    run: str | None  # the Run account it names, when it names one
    # what it says about its run that no event carries (run id, name, total steps), JSON-ready: enough to
    # show a run the explorer only learns about after it was closed
    facts: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class DecodedEvent:
    ordinal: int  # position among the transaction's events
    name: str
    run: str | None
    data: dict[str, Any]  # JSON-ready: pubkeys as base58, text as str, other bytes as hex


@dataclass(frozen=True)
class DecodedTransaction:
    signature: str
    slot: int
    block_time: int | None
    err: str | None
    instructions: tuple[DecodedInstruction, ...]
    events: tuple[DecodedEvent, ...]

    @property
    def runs(self) -> set[str]:
        found = {ix.run for ix in self.instructions} | {e.run for e in self.events}
        return {r for r in found if r}


def jsonable(value: Any, field: str = "") -> Any:
    """A decoded IDL value as JSON: padding dropped, pubkeys base58, NUL-padded text as str, hashes hex."""
    if isinstance(value, dict):
        return {
            str(k): jsonable(v, str(k))
            for k, v in value.items()
            if not (isinstance(k, str) and k.startswith("_"))
        }
    if isinstance(value, list):
        return [jsonable(v, field) for v in value]
    if isinstance(value, Pubkey):
        return str(value)
    if isinstance(value, bytes):
        if any(h in field for h in _HEX_FIELDS):
            return value.hex()
        raw = value.rstrip(b"\0")
        try:
            text = raw.decode()
        except UnicodeDecodeError:
            return value.hex()
        if b"\0" in raw or any(ord(c) < 32 and c not in "\n\t" for c in text):
            return value.hex()
        return text
    if isinstance(value, float) and value != value:  # NaN is not JSON
        return None
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 2**53:
        return str(value)  # JavaScript numbers would round it
    return value


def _account_keys(tx: VersionedTransaction, meta: dict[str, Any]) -> list[str]:
    keys = [str(k) for k in tx.message.account_keys]
    loaded = meta.get("loadedAddresses") or {}
    return keys + list(loaded.get("writable") or []) + list(loaded.get("readonly") or [])


def _instructions(
    idl: Idl, program_id: str, tx: VersionedTransaction, keys: list[str]
) -> list[DecodedInstruction]:
    by_discriminator = {bytes(ix["discriminator"]): ix for ix in idl.instructions.values()}
    out = []
    for compiled in tx.message.instructions:
        program = keys[compiled.program_id_index]
        accounts = [keys[i] for i in bytes(compiled.accounts) if i < len(keys)]
        data = bytes(compiled.data)
        if program == LOADER_V3 and program_id in accounts:
            kind = int.from_bytes(data[:4], "little") if len(data) >= 4 else -1
            names = {2: "deploy", 3: "upgrade", 4: "set_authority", 5: "close", 6: "extend"}
            out.append(DecodedInstruction(f"loader:{names.get(kind, kind)}", None))
            continue
        if program != program_id:
            continue
        if data[:8] == IDL_IX_TAG:  # Anchor's IDL account instructions
            variant = data[8] if len(data) > 8 else -1
            names = {0: "create", 2: "write", 4: "set_authority", 5: "close"}
            out.append(DecodedInstruction(f"anchor_idl:{names.get(variant, variant)}", None))
            continue
        ix = by_discriminator.get(data[:8])
        if ix is None:
            out.append(DecodedInstruction("unknown", None))
            continue
        names = [a["name"] for a in ix["accounts"]]
        run = None
        if "run" in names and names.index("run") < len(accounts):
            run = accounts[names.index("run")]
        facts = _facts(idl, ix, data, dict(zip(names, accounts, strict=False)))
        out.append(DecodedInstruction(ix["name"], run, facts))
    return out


def _facts(idl: Idl, ix: dict[str, Any], data: bytes, accounts: dict[str, str]) -> dict[str, Any]:
    """The run's id, authority, name and length from the instructions that set them (nothing else)."""
    if ix["name"] not in ("initialize_run", "update_metadata", "update_config"):
        return {}
    try:
        args, at = {}, 8
        for arg in ix["args"]:
            args[arg["name"]], at = idl.decode(arg["type"], data, at)
    except (IdlError, ValueError, IndexError, KeyError):  # not this IDL's layout: say nothing
        return {}
    if ix["name"] == "initialize_run":
        facts = {"run_id": jsonable(args["run_id"])}
        return facts | ({"authority": accounts["authority"]} if "authority" in accounts else {})
    if ix["name"] == "update_metadata":
        metadata = jsonable(args["metadata"])
        return {"name": metadata.get("name", ""), "description": metadata.get("description", "")}
    config = jsonable(args["config"])
    return {"total_steps": config.get("total_steps"), "config": config}


def decode_transaction(
    idl: Idl, program_id: str, signature: str, result: dict[str, Any]
) -> DecodedTransaction:
    """Decode a `getTransaction` result fetched with encoding base64. Raises ValueError on malformed data."""
    try:
        meta = result.get("meta") or {}
        raw, encoding = result["transaction"]
        if encoding != "base64":
            raise ValueError(f"expected a base64 transaction, got {encoding!r}")
        tx = VersionedTransaction.from_bytes(base64.b64decode(raw, validate=True))
        slot = int(result["slot"])
    except (KeyError, TypeError, ValueError) as e:  # binascii.Error is a ValueError
        raise ValueError(f"transaction {signature}: malformed getTransaction answer ({e})") from e
    err = meta.get("err")
    keys = _account_keys(tx, meta)
    instructions = _instructions(idl, program_id, tx, keys)
    events: list[DecodedEvent] = []
    if err is None:
        for ordinal, (name, value) in enumerate(
            idl.events_in_logs(meta.get("logMessages") or [], program_id)
        ):
            data = jsonable(value)
            run = data.get("run") if isinstance(data.get("run"), str) else None
            events.append(DecodedEvent(ordinal, name, run, data))
    block_time = result.get("blockTime")
    return DecodedTransaction(
        signature,
        slot,
        int(block_time) if block_time is not None else None,
        None if err is None else str(err),
        tuple(instructions),
        tuple(events),
    )
