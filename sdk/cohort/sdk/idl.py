"""An Anchor (0.30+ IDL) coder: instruction data, accounts, events and errors, driven by the IDL alone.

Borsh as Anchor uses it: little-endian integers, `bool` and unit enums as one byte, `pubkey` as 32 bytes,
fixed arrays without a length, `string`/`vec` with a u32 length, `option` with a one-byte tag. Structs
decode to dicts; enums to their variant name (a dict {name: fields} when the variant carries data).
Byte arrays ([u8; N]) decode to `bytes`; on encode they accept bytes or str, NUL-padded to N.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from solders.instruction import AccountMeta, Instruction
from solders.pubkey import Pubkey

_PRIMS: dict[str, struct.Struct] = {
    "u8": struct.Struct("<B"),
    "i8": struct.Struct("<b"),
    "u16": struct.Struct("<H"),
    "i16": struct.Struct("<h"),
    "u32": struct.Struct("<I"),
    "i32": struct.Struct("<i"),
    "u64": struct.Struct("<Q"),
    "i64": struct.Struct("<q"),
    "f32": struct.Struct("<f"),
    "f64": struct.Struct("<d"),
}


# Agave's log lines around each invocation: written by the runtime, never by a program (whose own lines all
# start "Program log: ", "Program data: ", "Program return: " or "Program consumption: ")
_BASE58_ID = r"[1-9A-HJ-NP-Za-km-z]{32,44}"
_LOG_INVOKE = re.compile(rf"Program ({_BASE58_ID}) invoke \[([1-9][0-9]*)\]")
_LOG_SUCCESS = re.compile(rf"Program ({_BASE58_ID}) success")
_LOG_FAILED = re.compile(rf"Program ({_BASE58_ID}) failed(: .*)?", re.DOTALL)
_LOG_DATA = "Program data: "
_LOG_TRUNCATED = "Log truncated"
REUSED_FIELD_BYTES = 1024  # decode_account_reusing: fields this large are kept by their bytes


class IdlError(ValueError):
    """A value does not fit the IDL type it is encoded as, or bytes do not decode."""


@dataclass(frozen=True)
class IdlErrorCode:
    code: int
    name: str
    msg: str


def _discriminator(namespace: str, name: str) -> bytes:
    return hashlib.sha256(f"{namespace}:{name}".encode()).digest()[:8]


class Idl:
    """One program's IDL."""

    def __init__(self, idl: dict[str, Any]) -> None:
        self.raw = idl
        self.name: str = idl["metadata"]["name"]
        self.address = Pubkey.from_string(idl["address"])
        self.types: dict[str, dict] = {t["name"]: t["type"] for t in idl.get("types", [])}
        self.instructions: dict[str, dict] = {ix["name"]: ix for ix in idl["instructions"]}
        self.accounts: dict[str, bytes] = {
            a["name"]: bytes(a.get("discriminator") or _discriminator("account", a["name"]))
            for a in idl.get("accounts", [])
        }
        self.events: dict[bytes, str] = {
            bytes(e.get("discriminator") or _discriminator("event", e["name"])): e["name"]
            for e in idl.get("events", [])
        }
        self.errors: dict[int, IdlErrorCode] = {
            e["code"]: IdlErrorCode(e["code"], e["name"], e.get("msg", ""))
            for e in idl.get("errors", [])
        }
        self.constants: dict[str, int] = {
            c["name"]: int(c["value"]) for c in idl.get("constants", []) if c["type"] in _PRIMS
        }
        self._sizes: dict[str, int | None] = {}
        self._layouts: dict[str, list[tuple[str, Any, int, int]] | None] = {}
        self._reused: dict[
            tuple[str, str], tuple[bytes, Any]
        ] = {}  # (account, field) -> (bytes, value)

    @classmethod
    def load(cls, path: str | Path) -> Idl:
        return cls(json.loads(Path(path).read_text()))

    # -- sizes ----------------------------------------------------------------------------------------
    def size_of(self, type_: Any) -> int | None:
        """Encoded size of a fixed-size type, None for variable-size ones."""
        if isinstance(type_, str):
            if type_ in _PRIMS:
                return _PRIMS[type_].size
            return {"bool": 1, "pubkey": 32}.get(type_)
        if "array" in type_:
            item, n = type_["array"]
            size = self.size_of(item)
            return None if size is None else size * n
        if "defined" in type_:
            name = type_["defined"]["name"]
            if name not in self._sizes:
                self._sizes[name] = None
                body = self.types[name]
                if body["kind"] == "struct":
                    sizes = [self.size_of(f["type"]) for f in body.get("fields", [])]
                    self._sizes[name] = None if None in sizes else sum(sizes)  # type: ignore[arg-type]
                elif all(not v.get("fields") for v in body["variants"]):
                    self._sizes[name] = 1
            return self._sizes[name]
        return None

    def offset_of(self, struct: str, *path: str) -> int:
        """Byte offset of a (nested) field inside a fixed-size struct: offset_of("Run", "epoch", "rounds")."""
        offset, name = 0, struct
        for field in path:
            body = self.types[name]
            for f in body["fields"]:
                if f["name"] == field:
                    break
                size = self.size_of(f["type"])
                if size is None:
                    raise IdlError(f"{name}.{f['name']} is not fixed-size: no offsets past it")
                offset += size
            else:
                raise IdlError(f"{name} has no field {field!r}")
            type_ = f["type"]
            name = (
                type_["defined"]["name"] if isinstance(type_, dict) and "defined" in type_ else ""
            )
        return offset

    def account_size(self, name: str) -> int:
        size = self.size_of({"defined": {"name": name}})
        if size is None:
            raise IdlError(f"account {name} is not fixed-size")
        return 8 + size

    # -- encoding -------------------------------------------------------------------------------------
    def encode(self, type_: Any, value: Any, path: str = "value") -> bytes:
        try:
            return self._encode(type_, value, path)
        except (struct.error, OverflowError, TypeError) as e:
            raise IdlError(f"{path}: {e}") from e

    def _encode(self, type_: Any, value: Any, path: str) -> bytes:
        if isinstance(type_, str):
            if type_ in _PRIMS:
                if type_.startswith("f"):
                    return _PRIMS[type_].pack(float(value))
                if isinstance(value, bool) or not isinstance(value, int):
                    raise IdlError(f"{path}: expected an integer for {type_}, got {value!r}")
                return _PRIMS[type_].pack(value)
            if type_ == "bool":
                if not isinstance(value, bool):
                    raise IdlError(f"{path}: expected a bool, got {value!r}")
                return bytes([value])
            if type_ == "pubkey":
                if isinstance(value, (bytes, bytearray)):
                    if len(value) != 32:
                        raise IdlError(f"{path}: a pubkey is 32 bytes, got {len(value)}")
                    return bytes(value)
                try:
                    return bytes(
                        value if isinstance(value, Pubkey) else Pubkey.from_string(str(value))
                    )
                except ValueError as e:
                    raise IdlError(f"{path}: {value!r} is not a base58 address ({e})") from e
            if type_ == "string":
                raw = str(value).encode()
                return struct.pack("<I", len(raw)) + raw
            if type_ == "bytes":
                return struct.pack("<I", len(value)) + bytes(value)
            raise IdlError(f"{path}: unknown type {type_}")
        if "array" in type_:
            item, n = type_["array"]
            if item == "u8" and isinstance(value, (bytes, bytearray, str)):
                raw = value.encode() if isinstance(value, str) else bytes(value)
                if len(raw) > n:
                    raise IdlError(f"{path}: {len(raw)} bytes do not fit in {n}")
                return raw.ljust(n, b"\0")
            values = list(value)
            if len(values) != n:
                raise IdlError(f"{path}: expected {n} items, got {len(values)}")
            return b"".join(self._encode(item, v, f"{path}[{i}]") for i, v in enumerate(values))
        if "vec" in type_:
            values = list(value)
            body = b"".join(
                self._encode(type_["vec"], v, f"{path}[{i}]") for i, v in enumerate(values)
            )
            return struct.pack("<I", len(values)) + body
        if "option" in type_:
            return b"\0" if value is None else b"\1" + self._encode(type_["option"], value, path)
        if "defined" in type_:
            name = type_["defined"]["name"]
            body = self.types[name]
            if body["kind"] == "struct":
                if not isinstance(value, dict):
                    raise IdlError(
                        f"{path}: expected a dict for {name}, got {type(value).__name__}"
                    )
                out = []
                for f in body.get("fields", []):
                    fname = f["name"]
                    if fname in value:
                        out.append(self._encode(f["type"], value[fname], f"{path}.{fname}"))
                    elif fname.startswith("_"):  # padding may be left out
                        out.append(bytes(self.size_of(f["type"]) or 0))
                    else:
                        raise IdlError(f"{path}: missing field {fname!r} of {name}")
                unknown = set(value) - {f["name"] for f in body.get("fields", [])}
                if unknown:
                    raise IdlError(f"{path}: unknown field(s) {sorted(unknown)} for {name}")
                return b"".join(out)
            return self._encode_enum(name, body, value, path)
        raise IdlError(f"{path}: unsupported type {type_}")

    def _encode_enum(self, name: str, body: dict, value: Any, path: str) -> bytes:
        variants = body["variants"]
        names = [v["name"] for v in variants]
        fields: Any = None
        if isinstance(value, dict) and len(value) == 1:
            value, fields = next(iter(value.items()))
        if isinstance(value, int) and not isinstance(value, bool):
            if not 0 <= value < len(variants):
                raise IdlError(f"{path}: {value} is not a variant index of {name}")
            index = value
        elif value in names:
            index = names.index(value)
        else:
            raise IdlError(f"{path}: {value!r} is not one of {name}'s variants {names}")
        out = bytes([index])
        declared = variants[index].get("fields")
        if declared:
            if isinstance(declared[0], dict):
                out += b"".join(
                    self._encode(f["type"], fields[f["name"]], f"{path}.{f['name']}")
                    for f in declared
                )
            else:  # tuple variant: a sequence, or the {position: value} dict decode gives
                if isinstance(fields, dict):
                    fields = [fields[i] for i in range(len(declared))]
                out += b"".join(
                    self._encode(t, v, path) for t, v in zip(declared, fields, strict=True)
                )
        return out

    # -- decoding -------------------------------------------------------------------------------------
    def decode(self, type_: Any, data: bytes | memoryview, offset: int = 0) -> tuple[Any, int]:
        """(value, offset after it)."""
        try:
            return self._decode(type_, memoryview(data), offset)
        except (struct.error, IndexError, UnicodeDecodeError) as e:
            raise IdlError(f"cannot decode {type_} at offset {offset}: {e}") from e

    def _decode(self, type_: Any, data: memoryview, at: int) -> tuple[Any, int]:
        if isinstance(type_, str):
            if type_ in _PRIMS:
                s = _PRIMS[type_]
                return s.unpack_from(data, at)[0], at + s.size
            if type_ == "bool":
                if data[at] > 1:
                    raise IdlError(f"invalid bool byte {data[at]} at offset {at}")
                return bool(data[at]), at + 1
            if type_ == "pubkey":
                return Pubkey.from_bytes(bytes(data[at : at + 32])), at + 32
            if type_ in ("string", "bytes"):
                n = struct.unpack_from("<I", data, at)[0]
                raw = bytes(data[at + 4 : at + 4 + n])
                if len(raw) != n:
                    raise IdlError(f"{type_} of {n} bytes runs past the end of the data")
                return (raw.decode() if type_ == "string" else raw), at + 4 + n
            raise IdlError(f"unknown type {type_}")
        if "array" in type_:
            item, n = type_["array"]
            if item == "u8":
                raw = bytes(data[at : at + n])
                if len(raw) != n:
                    raise IdlError(f"[u8; {n}] runs past the end of the data")
                return raw, at + n
            out = []
            for _ in range(n):
                v, at = self._decode(item, data, at)
                out.append(v)
            return out, at
        if "vec" in type_:
            n = struct.unpack_from("<I", data, at)[0]
            at += 4
            out = []
            for _ in range(n):
                v, at = self._decode(type_["vec"], data, at)
                out.append(v)
            return out, at
        if "option" in type_:
            tag = data[at]
            if tag == 0:
                return None, at + 1
            return self._decode(type_["option"], data, at + 1)
        name = type_["defined"]["name"]
        body = self.types[name]
        if body["kind"] == "struct":
            out_struct = {}
            for f in body.get("fields", []):
                out_struct[f["name"]], at = self._decode(f["type"], data, at)
            return out_struct, at
        index = data[at]
        variants = body["variants"]
        if index >= len(variants):
            raise IdlError(f"{index} is not a variant of {name}")
        variant = variants[index]
        at += 1
        declared = variant.get("fields")
        if not declared:
            return variant["name"], at
        values = {}
        for i, f in enumerate(declared):
            key, ftype = (f["name"], f["type"]) if isinstance(f, dict) else (i, f)
            values[key], at = self._decode(ftype, data, at)
        return {variant["name"]: values}, at

    # -- the program's surface ------------------------------------------------------------------------
    def instruction_data(self, name: str, args: dict[str, Any] | None = None) -> bytes:
        if name not in self.instructions:
            raise IdlError(f"{self.name} has no instruction {name!r}")
        ix = self.instructions[name]
        args = dict(args or {})
        out = [bytes(ix["discriminator"])]
        for a in ix["args"]:
            if a["name"] not in args:
                if a["name"].startswith("_"):
                    out.append(bytes(self.size_of(a["type"]) or 0))
                    continue
                raise IdlError(f"{name}: missing argument {a['name']!r}")
            out.append(self.encode(a["type"], args.pop(a["name"]), f"{name}.{a['name']}"))
        if args:
            raise IdlError(f"{name}: unknown argument(s) {sorted(args)}")
        return b"".join(out)

    def instruction(
        self,
        name: str,
        accounts: dict[str, Pubkey],
        args: dict[str, Any] | None = None,
        *,
        program_id: Pubkey | None = None,
    ) -> Instruction:
        """A ready instruction: accounts in IDL order with their writable/signer flags (accounts with a
        fixed address in the IDL may be left out), data = discriminator + Borsh args."""
        if name not in self.instructions:
            raise IdlError(f"{self.name} has no instruction {name!r}")
        metas = []
        given = dict(accounts)
        for a in self.instructions[name]["accounts"]:
            key = given.pop(a["name"], None)
            if key is None and "address" in a:
                key = Pubkey.from_string(a["address"])
            if key is None:
                raise IdlError(f"{name}: missing account {a['name']!r}")
            metas.append(AccountMeta(key, bool(a.get("signer")), bool(a.get("writable"))))
        if given:
            raise IdlError(f"{name}: unknown account(s) {sorted(given)}")
        return Instruction(program_id or self.address, self.instruction_data(name, args), metas)

    def decode_account(self, name: str, data: bytes | memoryview) -> dict[str, Any]:
        disc = self.accounts.get(name)
        if disc is None:
            raise IdlError(f"{self.name} has no account type {name!r}")
        if bytes(data[:8]) != disc:
            raise IdlError(f"account data is not a {name} (discriminator {bytes(data[:8]).hex()})")
        value, _ = self.decode({"defined": {"name": name}}, data, 8)
        return value

    def decode_account_reusing(self, name: str, data: bytes | memoryview) -> dict[str, Any]:
        """`decode_account` for an account read again and again (a followed Run, several times a round):
        each fixed-size field of REUSED_FIELD_BYTES or more whose bytes equal those of the last call is not
        decoded again but shared with it (read-only: callers must not change what they get). Most of a
        Run's bytes are its member table and registry, which rarely change; decoding them was most of a
        follower's CPU."""
        layout = self._layout(name)
        if layout is None:
            return self.decode_account(name, data)
        view = memoryview(data)
        if bytes(view[:8]) != self.accounts[name]:
            raise IdlError(f"account data is not a {name} (discriminator {bytes(view[:8]).hex()})")
        value: dict[str, Any] = {}
        for field, type_, offset, size in layout:
            if size < REUSED_FIELD_BYTES:
                value[field] = self.decode(type_, view, offset)[0]
                continue
            raw = bytes(view[offset : offset + size])
            last = self._reused.get((name, field))
            if last is None or last[0] != raw:
                if len(raw) != size:
                    raise IdlError(
                        f"{name} data ends inside {field} (offset {offset}, {size} bytes)"
                    )
                last = (raw, self.decode(type_, raw)[0])
                self._reused[(name, field)] = last
            value[field] = last[1]
        return value

    def _layout(self, name: str) -> list[tuple[str, Any, int, int]] | None:
        """(field, type, offset in the account data, size) of a fixed-size account; None if not fixed-size."""
        if name not in self._layouts:
            if name not in self.accounts:
                raise IdlError(f"{self.name} has no account type {name!r}")
            layout, offset = [], 8
            for f in self.types[name]["fields"]:
                size = self.size_of(f["type"])
                if size is None:
                    layout = None
                    break
                layout.append((f["name"], f["type"], offset, size))
                offset += size
            self._layouts[name] = layout
        return self._layouts[name]

    def decode_event(self, payload: bytes) -> tuple[str, dict[str, Any]] | None:
        """An event from the bytes of one `Program data:` line, or None if it is not one of ours."""
        name = self.events.get(bytes(payload[:8]))
        if name is None:
            return None
        value, _ = self.decode({"defined": {"name": name}}, payload, 8)
        return name, value

    def events_in_logs(
        self, logs: Iterable[str], program_id: Pubkey | str
    ) -> list[tuple[str, dict[str, Any]]]:
        """The events `program_id` itself logged (`Program data:` lines while it is the innermost executing
        program, not lines of programs it calls or that call it), in log order, from invocations seen to
        succeed up to the top-level instruction. Any program can log bytes that decode as our events, so
        attribution follows the runtime's `invoke [n]` / `success` lines, which programs cannot forge.

        Strict where logs cannot be trusted: a `failed` line means the transaction failed, so none of its
        events happened (returns []); after `Log truncated` lines may be missing (a shorter one can still
        appear), so parsing stops there and keeps only invocations already complete, as it does at any line
        that contradicts the stack. Logs never prove the transaction committed (it can fail after its last
        instruction, or fail before any log): callers check the transaction's `err` too. Undecodable data
        is skipped."""
        wanted = str(program_id)
        frames: list[tuple[str, list[tuple[str, dict[str, Any]]]]] = []  # (program, events held)
        out: list[tuple[str, dict[str, Any]]] = []
        for line in logs:
            if line == _LOG_TRUNCATED:
                break
            if m := _LOG_INVOKE.fullmatch(line):
                if int(m[2]) != len(frames) + 1:
                    break
                frames.append((m[1], []))
            elif m := _LOG_SUCCESS.fullmatch(line):
                if not frames or frames[-1][0] != m[1]:
                    break
                _, held = frames.pop()
                # an inner success is provisional: its caller may still fail
                (frames[-1][1] if frames else out).extend(held)
            elif _LOG_FAILED.fullmatch(line):
                return []
            elif line.startswith(_LOG_DATA) and frames and frames[-1][0] == wanted:
                frames[-1][1].extend(self._events_in_data_line(line))
        return out

    def _events_in_data_line(self, line: str) -> list[tuple[str, dict[str, Any]]]:
        out = []
        for field in line.removeprefix(_LOG_DATA).split():
            try:
                event = self.decode_event(base64.b64decode(field, validate=True))
            except (ValueError, IdlError):  # binascii.Error is a ValueError
                continue
            if event is not None:
                out.append(event)
        return out

    def error(self, code: int) -> IdlErrorCode | None:
        return self.errors.get(code)
