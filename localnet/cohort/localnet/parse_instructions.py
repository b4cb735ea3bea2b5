"""`jsonParsed` instructions for the system program, the upgradeable loader and SPL Memo.

`parse_instruction` returns `(program, parsed)` or None for instructions it does not know, which the
transaction encoder then shows partially decoded (programId, accounts, base58 data) as validators do.
"""

from __future__ import annotations

import struct
from typing import Any

from solders.pubkey import Pubkey

from .codec import b64encode

SYSTEM_PROGRAM = "11111111111111111111111111111111"
LOADER_V3 = "BPFLoaderUpgradeab1e11111111111111111111111"
MEMO_PROGRAMS = (
    "MemoSq4gqABAXKb96qnH8TysNcWxMyWCqXgDLGmfcHr",
    "Memo1UhkJRfHyvLMcVucJwxXeuD728EqVDDwQDxFMNo",
)

Parsed = tuple[str, Any]


class _Reader:
    """Just enough bincode: little-endian ints, pubkeys, u64-length strings."""

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, fmt: str) -> Any:
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return value

    def pubkey(self) -> str:
        key = Pubkey.from_bytes(self.data[self.pos : self.pos + 32])
        self.pos += 32
        return str(key)

    def string(self) -> str:
        n = self.take("<Q")
        text = self.data[self.pos : self.pos + n].decode("utf-8")
        self.pos += n
        return text


def _named(accounts: list[str], *names: str) -> dict[str, str]:
    return {name: accounts[i] for i, name in enumerate(names) if i < len(accounts) and name}


def _system(data: bytes, accounts: list[str]) -> Parsed | None:
    r = _Reader(data)
    tag = r.take("<I")
    if tag == 0:
        lamports, space = r.take("<Q"), r.take("<Q")
        info = _named(accounts, "source", "newAccount")
        info.update(lamports=lamports, space=space, owner=r.pubkey())
        return "system", {"type": "createAccount", "info": info}
    if tag == 1:
        info = _named(accounts, "account")
        info["owner"] = r.pubkey()
        return "system", {"type": "assign", "info": info}
    if tag == 2:
        info = _named(accounts, "source", "destination")
        info["lamports"] = r.take("<Q")
        return "system", {"type": "transfer", "info": info}
    if tag == 3:
        info = _named(accounts, "source", "newAccount")
        info.update(base=r.pubkey(), seed=r.string(), lamports=r.take("<Q"), space=r.take("<Q"))
        info["owner"] = r.pubkey()
        return "system", {"type": "createAccountWithSeed", "info": info}
    if tag == 4:
        info = _named(accounts, "nonceAccount", "recentBlockhashesSysvar", "nonceAuthority")
        return "system", {"type": "advanceNonce", "info": info}
    if tag == 5:
        info = _named(
            accounts,
            "nonceAccount",
            "destination",
            "recentBlockhashesSysvar",
            "rentSysvar",
            "nonceAuthority",
        )
        info["lamports"] = r.take("<Q")
        return "system", {"type": "withdrawFromNonce", "info": info}
    if tag == 6:
        info = _named(accounts, "nonceAccount", "recentBlockhashesSysvar", "rentSysvar")
        info["nonceAuthority"] = r.pubkey()
        return "system", {"type": "initializeNonce", "info": info}
    if tag == 7:
        info = _named(accounts, "nonceAccount", "nonceAuthority")
        info["newAuthorized"] = r.pubkey()
        return "system", {"type": "authorizeNonce", "info": info}
    if tag == 8:
        info = _named(accounts, "account")
        info["space"] = r.take("<Q")
        return "system", {"type": "allocate", "info": info}
    if tag == 11:
        info = _named(accounts, "source", "sourceBase", "destination")
        info.update(lamports=r.take("<Q"), sourceSeed=r.string(), sourceOwner=r.pubkey())
        return "system", {"type": "transferWithSeed", "info": info}
    if tag == 12:
        return "system", {"type": "upgradeNonce", "info": _named(accounts, "nonceAccount")}
    return None


def _loader_v3(data: bytes, accounts: list[str]) -> Parsed | None:
    r = _Reader(data)
    tag = r.take("<I")
    if tag == 0:
        info = _named(accounts, "account", "authority")
        return "bpf-upgradeable-loader", {"type": "initializeBuffer", "info": info}
    if tag == 1:
        offset, length = r.take("<I"), r.take("<Q")
        info: dict[str, Any] = {"offset": offset, "bytes": b64encode(data[16 : 16 + length])}
        info.update(_named(accounts, "account", "authority"))
        return "bpf-upgradeable-loader", {"type": "write", "info": info}
    if tag == 2:
        info = {"maxDataLen": r.take("<Q")}
        info.update(
            _named(
                accounts,
                "payerAccount",
                "programDataAccount",
                "programAccount",
                "bufferAccount",
                "rentSysvar",
                "clockSysvar",
                "systemProgram",
                "authority",
            )
        )
        return "bpf-upgradeable-loader", {"type": "deployWithMaxDataLen", "info": info}
    if tag == 3:
        info = _named(
            accounts,
            "programDataAccount",
            "programAccount",
            "bufferAccount",
            "spillAccount",
            "rentSysvar",
            "clockSysvar",
            "authority",
        )
        return "bpf-upgradeable-loader", {"type": "upgrade", "info": info}
    if tag == 4:
        info = _named(accounts, "account", "authority", "newAuthority")
        return "bpf-upgradeable-loader", {"type": "setAuthority", "info": info}
    if tag == 5:
        info = _named(accounts, "account", "recipient", "authority", "programAccount")
        return "bpf-upgradeable-loader", {"type": "close", "info": info}
    if tag == 6:
        info = {"additionalBytes": r.take("<I")}
        info.update(
            _named(
                accounts, "programDataAccount", "programAccount", "systemProgram", "payerAccount"
            )
        )
        return "bpf-upgradeable-loader", {"type": "extendProgram", "info": info}
    return None


def parse_instruction(program_id: str, accounts: list[str], data: bytes) -> Parsed | None:
    try:
        if program_id == SYSTEM_PROGRAM:
            return _system(data, accounts)
        if program_id == LOADER_V3:
            return _loader_v3(data, accounts)
        if program_id in MEMO_PROGRAMS:
            return "spl-memo", data.decode("utf-8")
    except (struct.error, UnicodeDecodeError, ValueError, IndexError):
        return None  # malformed data: shown partially decoded, like validators do
    return None
