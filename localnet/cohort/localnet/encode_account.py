"""Accounts in the RPC's UiAccount form: base64 / base58 / legacy binary / jsonParsed, with dataSlice."""

from __future__ import annotations

from typing import Any

from solders.account import Account
from solders.pubkey import Pubkey

from .codec import b58encode, b64encode
from .errors import INVALID_REQUEST, RpcError, invalid_params
from .parse_accounts import GetAccount, parse_account_data

RENT_EXEMPT_EPOCH = 2**64 - 1  # what validators report for rent-exempt accounts
MAX_BASE58_BYTES = 128
ACCOUNT_ENCODINGS = ("base64", "base58", "binary", "jsonParsed", "base64+zstd")


def check_encoding(encoding: object) -> str:
    if encoding not in ACCOUNT_ENCODINGS:
        raise invalid_params(
            f"unknown account encoding {encoding!r}; expected one of {', '.join(ACCOUNT_ENCODINGS)}"
        )
    return encoding  # type: ignore[return-value]


def check_data_slice(data_slice: object) -> tuple[int, int] | None:
    if data_slice is None:
        return None
    if not isinstance(data_slice, dict):
        raise invalid_params("dataSlice must be an object {offset, length}")
    offset, length = data_slice.get("offset"), data_slice.get("length")
    for name, value in (("offset", offset), ("length", length)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise invalid_params(f"dataSlice.{name} must be a non-negative integer, got {value!r}")
    return offset, length  # type: ignore[return-value]


def encode_data(
    account: Account,
    encoding: str,
    data_slice: tuple[int, int] | None,
    get_account: GetAccount,
) -> Any:
    data = bytes(account.data)
    if encoding == "jsonParsed":
        parsed = parse_account_data(account, get_account)
        if parsed is not None:
            program, body = parsed
            return {"program": program, "parsed": body, "space": len(data)}
        encoding = "base64"  # like validators: unparsable data falls back to base64
    if data_slice is not None:
        offset, length = data_slice
        data = data[offset : offset + length]
    if encoding in ("base58", "binary"):
        if len(data) > MAX_BASE58_BYTES:
            raise RpcError(
                INVALID_REQUEST,
                f"Encoded binary (base 58) data should be less than {MAX_BASE58_BYTES} bytes, "
                "please use Base64 encoding.",
            )
        text = b58encode(data)
        return text if encoding == "binary" else [text, "base58"]
    # base64+zstd is answered as plain base64 (the stdlib has no zstd); clients accept either
    return [b64encode(data), "base64"]


def encode_account(
    account: Account | None,
    encoding: str,
    data_slice: tuple[int, int] | None,
    get_account: GetAccount,
) -> dict[str, Any] | None:
    if account is None:
        return None
    return {
        "data": encode_data(account, encoding, data_slice, get_account),
        "executable": account.executable,
        "lamports": account.lamports,
        "owner": str(account.owner),
        "rentEpoch": RENT_EXEMPT_EPOCH,
        "space": len(account.data),
    }


def keyed_account(
    pubkey: Pubkey,
    account: Account,
    encoding: str,
    data_slice: tuple[int, int] | None,
    get_account: GetAccount,
) -> dict[str, Any]:
    return {
        "pubkey": str(pubkey),
        "account": encode_account(account, encoding, data_slice, get_account),
    }
