"""`jsonParsed` account data for the programs the Explorer shows: upgradeable loader, nonce, SPL Token.

Each parser takes raw account data and returns `(program, parsed)` or None when the data is not one of
its layouts, in which case the encoder falls back to base64 as validators do.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from solders.account import Account
from solders.hash import Hash
from solders.pubkey import Pubkey

from .codec import b64encode

LOADER_V3 = Pubkey.from_string("BPFLoaderUpgradeab1e11111111111111111111111")
SYSTEM_PROGRAM = Pubkey.from_string("11111111111111111111111111111111")
TOKEN_PROGRAM = Pubkey.from_string("TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA")
TOKEN_2022_PROGRAM = Pubkey.from_string("TokenzQdBNbLqP5VEhdkAS6EPFLC1PHnBqCXEpPxuEb")
_TOKEN_ACCOUNT_SIZE = 165
_MINT_SIZE = 82

Parsed = tuple[str, dict[str, Any]]
GetAccount = Callable[[Pubkey], Account | None]


def _option_pubkey(data: bytes, offset: int) -> str | None:
    """bincode Option<Pubkey>: a 1-byte tag then the key."""
    return str(Pubkey.from_bytes(data[offset + 1 : offset + 33])) if data[offset] else None


def _coption_pubkey(data: bytes, offset: int) -> str | None:
    """SPL's COption<Pubkey>: a 4-byte tag then the key, always 36 bytes."""
    tag = int.from_bytes(data[offset : offset + 4], "little")
    return str(Pubkey.from_bytes(data[offset + 4 : offset + 36])) if tag else None


def parse_upgradeable_loader(data: bytes) -> Parsed | None:
    if len(data) < 4:
        return None
    tag = int.from_bytes(data[:4], "little")
    if tag == 0:
        return "bpf-upgradeable-loader", {"type": "uninitialized"}
    if tag == 1 and len(data) >= 37:
        info = {"authority": _option_pubkey(data, 4), "data": [b64encode(data[37:]), "base64"]}
        return "bpf-upgradeable-loader", {"type": "buffer", "info": info}
    if tag == 2 and len(data) >= 36:
        info = {"programData": str(Pubkey.from_bytes(data[4:36]))}
        return "bpf-upgradeable-loader", {"type": "program", "info": info}
    if tag == 3 and len(data) >= 45:
        info = {
            "slot": int.from_bytes(data[4:12], "little"),
            "authority": _option_pubkey(data, 12),
            "data": [b64encode(data[45:]), "base64"],
        }
        return "bpf-upgradeable-loader", {"type": "programData", "info": info}
    return None


def parse_nonce(data: bytes) -> Parsed | None:
    """Versions::Current(State) — u32 version, u32 state, authority, durable nonce, lamports per signature."""
    if len(data) != 80:
        return None
    _version, state = struct.unpack_from("<II", data)
    if state == 0:
        return "nonce", {"type": "uninitialized"}
    info = {
        "authority": str(Pubkey.from_bytes(data[8:40])),
        "blockhash": str(Hash(data[40:72])),
        "feeCalculator": {"lamportsPerSignature": str(int.from_bytes(data[72:80], "little"))},
    }
    return "nonce", {"type": "initialized", "info": info}


def _token_amount(amount: int, decimals: int) -> dict[str, Any]:
    ui = amount / 10**decimals
    text = f"{amount:0{decimals + 1}d}" if decimals else str(amount)
    if decimals:
        text = (text[:-decimals] + "." + text[-decimals:]).rstrip("0").rstrip(".")
    return {"amount": str(amount), "decimals": decimals, "uiAmount": ui, "uiAmountString": text}


def parse_token(data: bytes, get_account: GetAccount, program: str) -> Parsed | None:
    if len(data) == _MINT_SIZE:
        supply, decimals, initialized = struct.unpack_from("<QBB", data, 36)
        info = {
            "decimals": decimals,
            "freezeAuthority": _coption_pubkey(data, 46),
            "isInitialized": bool(initialized),
            "mintAuthority": _coption_pubkey(data, 0),
            "supply": str(supply),
        }
        return program, {"type": "mint", "info": info}
    if len(data) != _TOKEN_ACCOUNT_SIZE:
        return None
    mint = Pubkey.from_bytes(data[:32])
    mint_account = get_account(mint)
    if mint_account is None or len(mint_account.data) < _MINT_SIZE:
        return None
    decimals = bytes(mint_account.data)[44]
    (amount,) = struct.unpack_from("<Q", data, 64)
    state = data[108]
    native_tag, native_reserve = struct.unpack_from("<IQ", data, 109)
    info: dict[str, Any] = {
        "isNative": bool(native_tag),
        "mint": str(mint),
        "owner": str(Pubkey.from_bytes(data[32:64])),
        "state": ("uninitialized", "initialized", "frozen")[state]
        if state < 3
        else "uninitialized",
        "tokenAmount": _token_amount(amount, decimals),
    }
    delegate = _coption_pubkey(data, 72)
    if delegate is not None:
        info["delegate"] = delegate
        info["delegatedAmount"] = _token_amount(struct.unpack_from("<Q", data, 121)[0], decimals)
    if native_tag:
        info["rentExemptReserve"] = _token_amount(native_reserve, decimals)
    close_authority = _coption_pubkey(data, 129)
    if close_authority is not None:
        info["closeAuthority"] = close_authority
    return program, {"type": "account", "info": info}


def parse_account_data(account: Account, get_account: GetAccount) -> Parsed | None:
    owner = account.owner
    data = bytes(account.data)
    if owner == LOADER_V3:
        return parse_upgradeable_loader(data)
    if owner == SYSTEM_PROGRAM:
        return parse_nonce(data)
    if owner == TOKEN_PROGRAM:
        return parse_token(data, get_account, "spl-token")
    if owner == TOKEN_2022_PROGRAM:
        return parse_token(data, get_account, "spl-token-2022")
    return None
