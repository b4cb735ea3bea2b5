"""Transactions as they arrive over RPC: decoding, and the full account-key list they touch."""

from __future__ import annotations

import binascii
from dataclasses import dataclass

from solders.account import Account
from solders.pubkey import Pubkey
from solders.transaction import VersionedTransaction

from .codec import b58decode, b64decode
from .errors import invalid_params

PACKET_DATA_SIZE = 1232  # the largest serialized transaction a validator accepts
ADDRESS_LOOKUP_TABLE = Pubkey.from_string("AddressLookupTab1e1111111111111111111111111")
_LOOKUP_TABLE_HEADER = 56  # LookupTableMeta; then 32-byte addresses


def decode_transaction(data: object, encoding: str) -> tuple[bytes, VersionedTransaction]:
    """The wire bytes and parsed transaction of a sendTransaction/simulateTransaction param."""
    if not isinstance(data, str):
        raise invalid_params("the transaction must be an encoded string")
    if encoding not in ("base58", "base64"):
        raise invalid_params(
            f"unsupported encoding: {encoding}. Supported encodings: base58, base64"
        )
    max_encoded = 1683 if encoding == "base58" else 1644
    if len(data) > max_encoded:
        raise invalid_params(
            f"{encoding} encoded solana_transaction::versioned::VersionedTransaction too large: "
            f"{len(data)} bytes (max: encoded/raw {max_encoded}/{PACKET_DATA_SIZE})"
        )
    try:
        raw = b64decode(data) if encoding == "base64" else b58decode(data)
    except (ValueError, binascii.Error) as exc:
        raise invalid_params(f"invalid {encoding} encoding: {exc}") from None
    if len(raw) > PACKET_DATA_SIZE:
        raise invalid_params(
            f"decoded solana_transaction::versioned::VersionedTransaction too large: {len(raw)} bytes "
            f"(max: {PACKET_DATA_SIZE} bytes)"
        )
    try:
        tx = VersionedTransaction.from_bytes(raw)
    except Exception as exc:  # solders raises its own ValueError subclasses with the bincode reason
        raise invalid_params(
            f"failed to deserialize solana_transaction::versioned::VersionedTransaction: {exc}"
        ) from None
    message = tx.message
    if len(tx.signatures) != message.header.num_required_signatures:
        raise invalid_params(
            f"transaction has {len(tx.signatures)} signatures but its message requires "
            f"{message.header.num_required_signatures}"
        )
    if not message.account_keys:
        raise invalid_params("transaction message has no account keys")
    return raw, tx


class AddressLookupFailed(Exception):
    """An address lookup table the transaction names is missing or too short (TransactionError in `err`)."""

    def __init__(self, err: str) -> None:
        super().__init__(err)
        self.err = err


@dataclass(frozen=True)
class ResolvedKeys:
    keys: list[Pubkey]  # static, then loaded writable, then loaded readonly
    writable: list[bool]
    loaded_writable: list[str]
    loaded_readonly: list[str]


def resolve_keys(tx: VersionedTransaction, get_account) -> ResolvedKeys:
    """Every account a transaction touches, with whether the message marks it writable.

    `get_account(Pubkey) -> Account | None` reads address lookup tables for v0 messages.
    """
    message = tx.message
    static = list(message.account_keys)
    header = message.header
    signers = header.num_required_signatures
    writable_signers = signers - header.num_readonly_signed_accounts
    writable_unsigned_end = len(static) - header.num_readonly_unsigned_accounts
    writable = [
        i < writable_signers or signers <= i < writable_unsigned_end for i in range(len(static))
    ]
    loaded_w: list[Pubkey] = []
    loaded_r: list[Pubkey] = []
    for lookup in getattr(message, "address_table_lookups", None) or []:
        table: Account | None = get_account(lookup.account_key)
        if table is None or table.owner != ADDRESS_LOOKUP_TABLE:
            raise AddressLookupFailed("AddressLookupTableNotFound")
        data = bytes(table.data)
        count = (len(data) - _LOOKUP_TABLE_HEADER) // 32
        for indexes, into in (
            (lookup.writable_indexes, loaded_w),
            (lookup.readonly_indexes, loaded_r),
        ):
            for i in bytes(indexes):
                if i >= count:
                    raise AddressLookupFailed("InvalidAddressLookupTableIndex")
                start = _LOOKUP_TABLE_HEADER + 32 * i
                into.append(Pubkey.from_bytes(data[start : start + 32]))
    keys = static + loaded_w + loaded_r
    writable += [True] * len(loaded_w) + [False] * len(loaded_r)
    return ResolvedKeys(keys, writable, [str(k) for k in loaded_w], [str(k) for k in loaded_r])
