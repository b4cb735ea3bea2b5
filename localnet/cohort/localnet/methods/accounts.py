"""Account reads: balance, account info (one or many), program accounts, token accounts by owner."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from solders.pubkey import Pubkey

from ..encode_account import check_data_slice, check_encoding, encode_account, keyed_account
from ..errors import invalid_params
from ..filters import matches, parse_filters
from ..params import Params, parse_pubkey, with_context
from ..parse_accounts import TOKEN_2022_PROGRAM, TOKEN_PROGRAM

if TYPE_CHECKING:
    from ..node import Node

MAX_MULTIPLE_ACCOUNTS = 100


def get_balance(node: Node, params: Any) -> dict[str, Any]:
    p = Params(params, 2)
    key = p.pubkey(0)
    p.config(1, node.bank.slot)
    return with_context(node.bank.slot, node.bank.svm.get_balance(key) or 0)


def _account_options(config: dict[str, Any]) -> tuple[str, tuple[int, int] | None]:
    return check_encoding(config.get("encoding", "binary")), check_data_slice(
        config.get("dataSlice")
    )


def get_account_info(node: Node, params: Any) -> dict[str, Any]:
    p = Params(params, 2)
    key = p.pubkey(0)
    encoding, data_slice = _account_options(p.config(1, node.bank.slot))
    bank = node.bank
    value = encode_account(bank.get_account(key), encoding, data_slice, bank.get_account)
    return with_context(bank.slot, value)


def get_multiple_accounts(node: Node, params: Any) -> dict[str, Any]:
    p = Params(params, 2)
    keys = p.required(0, "an array of base58 addresses")
    if not isinstance(keys, list):
        raise invalid_params("param 0 must be an array of base58 addresses")
    if len(keys) > MAX_MULTIPLE_ACCOUNTS:
        raise invalid_params(f"Too many inputs provided; max {MAX_MULTIPLE_ACCOUNTS}")
    pubkeys = [parse_pubkey(k) for k in keys]
    encoding, data_slice = _account_options(p.config(1, node.bank.slot))
    bank = node.bank
    values = [
        encode_account(bank.get_account(k), encoding, data_slice, bank.get_account) for k in pubkeys
    ]
    return with_context(bank.slot, values)


def _owned(node: Node, owner: Pubkey, filters: list) -> list:
    return [
        (key, account)
        for key, account in node.bank.svm.get_program_accounts(owner)
        if matches(filters, bytes(account.data))
    ]


def get_program_accounts(node: Node, params: Any) -> Any:
    p = Params(params, 2)
    owner = p.pubkey(0, "a base58 program id")
    config = p.config(1, node.bank.slot)
    encoding, data_slice = _account_options(config)
    filters = parse_filters(config.get("filters"))
    bank = node.bank
    values = [
        keyed_account(key, account, encoding, data_slice, bank.get_account)
        for key, account in _owned(node, owner, filters)
    ]
    return with_context(bank.slot, values) if config.get("withContext") else values


def get_token_accounts_by_owner(node: Node, params: Any) -> dict[str, Any]:
    p = Params(params, 3)
    owner = p.pubkey(0, "a base58 owner address")
    which = p.required(1, '{"mint": address} or {"programId": address}')
    config = p.config(2, node.bank.slot)
    encoding, data_slice = _account_options(config)
    if isinstance(which, dict) and "mint" in which:
        mint = parse_pubkey(which["mint"])
        mint_account = node.bank.get_account(mint)
        program = mint_account.owner if mint_account is not None else TOKEN_PROGRAM
        filters = [lambda d: d[:32] == bytes(mint)]
    elif isinstance(which, dict) and "programId" in which:
        program = parse_pubkey(which["programId"])
        filters = []
    else:
        raise invalid_params('param 1 must be {"mint": address} or {"programId": address}')
    if program not in (TOKEN_PROGRAM, TOKEN_2022_PROGRAM):
        raise invalid_params(f"unrecognized token program id {program}")
    owner_bytes = bytes(owner)
    filters += [lambda d: len(d) >= 165 and d[32:64] == owner_bytes]
    bank = node.bank
    values = [
        keyed_account(key, account, encoding, data_slice, bank.get_account)
        for key, account in _owned(node, program, filters)
    ]
    return with_context(bank.slot, values)


METHODS = {
    "getBalance": get_balance,
    "getAccountInfo": get_account_info,
    "getMultipleAccounts": get_multiple_accounts,
    "getProgramAccounts": get_program_accounts,
    "getTokenAccountsByOwner": get_token_accounts_by_owner,
}
