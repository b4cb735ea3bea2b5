"""Transactions: send (with preflight), simulate, airdrop, statuses, history."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from solders.transaction_metadata import FailedTransactionMetadata

from ..bank import (
    failure_err,
    inner_instructions_json,
    return_data_json,
    signature_verification_error,
)
from ..encode_account import check_encoding, encode_account
from ..encode_tx import check_max_version, check_tx_encoding, encode_transaction
from ..errors import INTERNAL_ERROR, RpcError, describe_transaction_error, invalid_params
from ..params import Params, parse_pubkey, parse_signature, with_context
from ..wire import decode_transaction

if TYPE_CHECKING:
    from ..node import Node

MAX_SIGNATURE_STATUSES = 256
MAX_SIGNATURES_FOR_ADDRESS = 1000


async def send_transaction(node: Node, params: Any) -> str:
    p = Params(params, 2)
    data = p.required(0, "an encoded transaction")
    config = p.config(1, node.bank.slot)
    raw, tx = decode_transaction(data, config.get("encoding", "base58"))
    skip = config.get("skipPreflight", False)
    if not isinstance(skip, bool):
        raise invalid_params("skipPreflight must be a boolean")
    return await node.send(raw, tx, preflight=not skip)


def simulate_transaction(node: Node, params: Any) -> dict[str, Any]:
    p = Params(params, 2)
    data = p.required(0, "an encoded transaction")
    config = p.config(1, node.bank.slot)
    _, tx = decode_transaction(data, config.get("encoding", "base58"))
    sig_verify = config.get("sigVerify", False)
    replace = config.get("replaceRecentBlockhash", False)
    if sig_verify and replace:
        raise invalid_params("sigVerify may not be used with replaceRecentBlockhash")
    if sig_verify and not all(tx.verify_with_results()):
        raise signature_verification_error()
    bank = node.bank
    outcome = bank.simulate(tx, check_blockhash=not replace)
    result: dict[str, Any] = {
        "accounts": None,
        "err": None,
        "innerInstructions": None,
        "loadedAccountsDataSize": None,
        "logs": [],
        "replacementBlockhash": None,
        "returnData": None,
        "unitsConsumed": 0,
    }
    if replace:
        blockhash, last_valid = bank.latest_blockhash()
        result["replacementBlockhash"] = {
            "blockhash": blockhash,
            "lastValidBlockHeight": last_valid,
        }
    if isinstance(outcome, str):  # stopped before execution
        result["err"] = outcome
        return with_context(bank.slot, result)
    post_accounts = {}
    if isinstance(outcome, FailedTransactionMetadata):
        result["err"] = failure_err(outcome)
        meta = outcome.meta()
    else:
        meta = outcome.meta()
        post_accounts = dict(outcome.post_accounts())
    result["logs"] = meta.logs()
    result["unitsConsumed"] = meta.compute_units_consumed()
    result["returnData"] = return_data_json(meta)
    if config.get("innerInstructions"):
        result["innerInstructions"] = inner_instructions_json(meta)
    accounts = config.get("accounts")
    if accounts is not None:
        if not isinstance(accounts, dict) or not isinstance(accounts.get("addresses"), list):
            raise invalid_params('accounts must be {"addresses": [address, ...], "encoding": ...}')
        encoding = check_encoding(accounts.get("encoding", "base64"))
        if encoding in ("binary", "base58"):
            raise invalid_params("base58 encoding is not supported for simulated accounts")
        keys = [parse_pubkey(k) for k in accounts["addresses"]]
        if len(keys) > len(tx.message.account_keys) + 255:
            raise invalid_params("too many accounts provided")
        result["accounts"] = [
            encode_account(
                post_accounts.get(k) or bank.get_account(k), encoding, None, bank.get_account
            )
            for k in keys
        ]
    return with_context(bank.slot, result)


async def request_airdrop(node: Node, params: Any) -> str:
    p = Params(params, 3)
    to = p.pubkey(0)
    lamports = p.integer(1, "lamports", minimum=1)
    p.config(2, node.bank.slot)
    raw, tx = node.bank.airdrop_transaction(to, lamports)
    try:
        return await node.send(raw, tx, preflight=True, verify=False)
    except RpcError as exc:
        if isinstance(exc.data, dict) and "err" in exc.data:
            detail = describe_transaction_error(exc.data["err"])
            raise RpcError(INTERNAL_ERROR, f"airdrop request failed: {detail}", exc.data) from None
        raise


def get_signature_statuses(node: Node, params: Any) -> dict[str, Any]:
    p = Params(params, 2)
    signatures = p.required(0, "an array of base58 signatures")
    if not isinstance(signatures, list):
        raise invalid_params("param 0 must be an array of base58 signatures")
    if len(signatures) > MAX_SIGNATURE_STATUSES:
        raise invalid_params(f"Too many inputs provided; max {MAX_SIGNATURE_STATUSES}")
    p.config(1, node.bank.slot)
    history = node.bank.history
    values = []
    for text in signatures:
        record = history.get(str(parse_signature(text)))
        if record is None:
            values.append(None)
            continue
        values.append(
            {
                "confirmationStatus": "finalized",  # one node: what lands is final at once
                "confirmations": None,
                "err": record.err,
                "slot": record.slot,
                "status": record.meta["status"],
            }
        )
    return with_context(node.bank.slot, values)


def get_transaction(node: Node, params: Any) -> dict[str, Any] | None:
    p = Params(params, 2)
    signature = str(p.signature(0))
    config = p.get(1)
    if isinstance(config, str):  # the legacy form: just the encoding
        config = {"encoding": config}
    config = Params([config], 1).config(0, node.bank.slot)
    encoding = check_tx_encoding(config.get("encoding", "json"))
    max_version = check_max_version(config.get("maxSupportedTransactionVersion"))
    record = node.bank.history.get(signature)
    if record is None:
        return None
    return encode_transaction(record, encoding, max_version)


def get_signatures_for_address(node: Node, params: Any) -> list[dict[str, Any]]:
    p = Params(params, 2)
    address = str(p.pubkey(0))
    config = p.config(1, node.bank.slot)
    limit = config.get("limit")
    limit = MAX_SIGNATURES_FOR_ADDRESS if limit is None else limit
    if (
        isinstance(limit, bool)
        or not isinstance(limit, int)
        or not 1 <= limit <= MAX_SIGNATURES_FOR_ADDRESS
    ):
        raise invalid_params(f"limit must be an integer from 1 to {MAX_SIGNATURES_FOR_ADDRESS}")
    before = config.get("before")
    until = config.get("until")
    before = None if before is None else str(parse_signature(before))
    until = None if until is None else str(parse_signature(until))
    records = node.bank.history.for_address(address, limit, before, until)
    return [
        {
            "blockTime": r.block_time,
            "confirmationStatus": "finalized",
            "err": r.err,
            "memo": None,
            "signature": r.signature,
            "slot": r.slot,
        }
        for r in records
    ]


# getTransactionsForAddress is absent on purpose: the Explorer tries it first and falls back to
# getSignaturesForAddress on -32601 (method not found).
METHODS = {
    "sendTransaction": send_transaction,
    "simulateTransaction": simulate_transaction,
    "requestAirdrop": request_airdrop,
    "getSignatureStatuses": get_signature_statuses,
    "getTransaction": get_transaction,
    "getSignaturesForAddress": get_signatures_for_address,
}
