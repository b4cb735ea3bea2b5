"""Transactions and blocks as getTransaction/getBlock return them: json, jsonParsed, base64, base58."""

from __future__ import annotations

from typing import Any

from solders.transaction import VersionedTransaction

from .blocks import Block
from .codec import b58decode, b58encode, b64encode
from .errors import TRANSACTION_VERSION_UNSUPPORTED, RpcError, invalid_params
from .history import TxRecord
from .parse_instructions import parse_instruction

TX_ENCODINGS = ("json", "jsonParsed", "base64", "base58")
TRANSACTION_DETAILS = ("full", "signatures", "accounts", "none")


def check_tx_encoding(encoding: object) -> str:
    if encoding not in TX_ENCODINGS:
        raise invalid_params(
            f"unknown transaction encoding {encoding!r}; expected one of {', '.join(TX_ENCODINGS)}"
        )
    return encoding  # type: ignore[return-value]


def check_max_version(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise invalid_params(
            f"maxSupportedTransactionVersion must be a non-negative integer, got {value!r}"
        )
    return value


def _version_field(record: TxRecord, max_version: int | None) -> Any:
    """The `version` value, or the -32015 error for v0 transactions asked for by legacy-only clients."""
    if record.is_legacy:
        return "legacy"
    if max_version is None:
        raise RpcError(
            TRANSACTION_VERSION_UNSUPPORTED,
            "Transaction version (0) is not supported by the requesting client. Please try the request "
            'again with the following configuration parameter: "maxSupportedTransactionVersion": 0',
        )
    return 0


def _header(tx: VersionedTransaction) -> dict[str, int]:
    h = tx.message.header
    return {
        "numRequiredSignatures": h.num_required_signatures,
        "numReadonlySignedAccounts": h.num_readonly_signed_accounts,
        "numReadonlyUnsignedAccounts": h.num_readonly_unsigned_accounts,
    }


def _lookups(tx: VersionedTransaction) -> list[dict[str, Any]]:
    return [
        {
            "accountKey": str(lookup.account_key),
            "writableIndexes": list(bytes(lookup.writable_indexes)),
            "readonlyIndexes": list(bytes(lookup.readonly_indexes)),
        }
        for lookup in tx.message.address_table_lookups
    ]


def _writable_flags(record: TxRecord) -> list[bool]:
    tx = record.tx
    h = tx.message.header
    static = len(tx.message.account_keys)
    signers = h.num_required_signatures
    loaded = record.meta["loadedAddresses"]
    flags = [
        i < signers - h.num_readonly_signed_accounts
        or (signers <= i < static - h.num_readonly_unsigned_accounts)
        for i in range(static)
    ]
    return flags + [True] * len(loaded["writable"]) + [False] * len(loaded["readonly"])


def _json_message(record: TxRecord) -> dict[str, Any]:
    tx = record.tx
    message: dict[str, Any] = {
        "header": _header(tx),
        "accountKeys": [str(k) for k in tx.message.account_keys],
        "recentBlockhash": str(tx.message.recent_blockhash),
        "instructions": [
            {
                "programIdIndex": ix.program_id_index,
                "accounts": list(bytes(ix.accounts)),
                "data": b58encode(bytes(ix.data)),
                "stackHeight": None,
            }
            for ix in tx.message.instructions
        ],
    }
    if not record.is_legacy:
        message["addressTableLookups"] = _lookups(tx)
    return message


def _parsed_instruction(
    keys: list[str], program_index: int, accounts: bytes, data: bytes, stack: Any
):
    program_id = keys[program_index]
    account_keys = [keys[i] for i in accounts]
    parsed = parse_instruction(program_id, account_keys, data)
    if parsed is None:
        return {
            "accounts": account_keys,
            "data": b58encode(data),
            "programId": program_id,
            "stackHeight": stack,
        }
    program, body = parsed
    return {"parsed": body, "program": program, "programId": program_id, "stackHeight": stack}


def _parsed_account_keys(record: TxRecord) -> list[dict[str, Any]]:
    tx = record.tx
    signers = tx.message.header.num_required_signatures
    static = len(tx.message.account_keys)
    return [
        {
            "pubkey": key,
            "signer": i < signers,
            "source": "transaction" if i < static else "lookupTable",
            "writable": writable,
        }
        for i, (key, writable) in enumerate(
            zip(record.account_keys, _writable_flags(record), strict=True)
        )
    ]


def _parsed_message(record: TxRecord) -> dict[str, Any]:
    tx = record.tx
    keys = record.account_keys
    message: dict[str, Any] = {
        "accountKeys": _parsed_account_keys(record),
        "instructions": [
            _parsed_instruction(keys, ix.program_id_index, bytes(ix.accounts), bytes(ix.data), None)
            for ix in tx.message.instructions
        ],
        "recentBlockhash": str(tx.message.recent_blockhash),
    }
    if not record.is_legacy:
        message["addressTableLookups"] = _lookups(tx)
    return message


def _parsed_meta(record: TxRecord) -> dict[str, Any]:
    keys = record.account_keys
    meta = dict(record.meta)
    meta["innerInstructions"] = [
        {
            "index": group["index"],
            "instructions": [
                _parsed_instruction(
                    keys,
                    ix["programIdIndex"],
                    bytes(ix["accounts"]),
                    b58decode(ix["data"]),
                    ix["stackHeight"],
                )
                for ix in group["instructions"]
            ],
        }
        for group in record.meta["innerInstructions"]
    ]
    return meta


def encode_transaction_body(record: TxRecord, encoding: str) -> tuple[Any, dict[str, Any]]:
    """(transaction, meta) in the requested encoding."""
    if encoding == "base64":
        return [b64encode(record.raw), "base64"], record.meta
    if encoding == "base58":
        return [b58encode(record.raw), "base58"], record.meta
    signatures = [str(s) for s in record.tx.signatures]
    if encoding == "jsonParsed":
        return {"message": _parsed_message(record), "signatures": signatures}, _parsed_meta(record)
    return {"message": _json_message(record), "signatures": signatures}, record.meta


def encode_transaction(record: TxRecord, encoding: str, max_version: int | None) -> dict[str, Any]:
    """A getTransaction result."""
    version = _version_field(record, max_version)
    transaction, meta = encode_transaction_body(record, encoding)
    result: dict[str, Any] = {
        "blockTime": record.block_time,
        "meta": meta,
        "slot": record.slot,
        "transaction": transaction,
    }
    if max_version is not None:
        result["version"] = version
    return result


def encode_block(
    block: Block,
    records: list[TxRecord],
    encoding: str,
    details: str,
    rewards: bool,
    max_version: int | None,
) -> dict[str, Any]:
    """A getBlock result."""
    result: dict[str, Any] = {
        "blockHeight": block.block_height,
        "blockTime": block.block_time,
        "blockhash": block.blockhash,
        "parentSlot": block.parent_slot,
        "previousBlockhash": block.previous_blockhash,
    }
    if rewards:
        result["rewards"] = []
    if details == "signatures":
        result["signatures"] = [r.signature for r in records]
    elif details == "full":
        txs = []
        for record in records:
            version = _version_field(record, max_version)
            transaction, meta = encode_transaction_body(record, encoding)
            entry: dict[str, Any] = {"meta": meta, "transaction": transaction}
            if max_version is not None:
                entry["version"] = version
            txs.append(entry)
        result["transactions"] = txs
    elif details == "accounts":
        txs = []
        for record in records:
            version = _version_field(record, max_version)
            meta = {
                k: record.meta[k]
                for k in (
                    "err",
                    "status",
                    "fee",
                    "preBalances",
                    "postBalances",
                    "preTokenBalances",
                    "postTokenBalances",
                )
            }
            body = {
                "accountKeys": _parsed_account_keys(record),
                "signatures": [str(s) for s in record.tx.signatures],
            }
            entry = {"meta": meta, "transaction": body}
            if max_version is not None:
                entry["version"] = version
            txs.append(entry)
        result["transactions"] = txs
    return result
