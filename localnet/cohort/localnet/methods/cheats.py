"""Test-only controls, named like surfpool's: move time forward, set an account, write a snapshot."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from solders.account import Account

from ..codec import b58decode, b64decode
from ..errors import invalid_params
from ..params import Params, parse_pubkey

if TYPE_CHECKING:
    from ..node import Node

MAX_WARP_SECONDS = 10 * 365 * 24 * 3600
MAX_ACCOUNT_BYTES = 10 * 1024 * 1024


async def warp_time(node: Node, params: Any) -> dict[str, int]:
    """Move the clock (and the slot, at the slot rate) forward by `seconds`; time never goes back."""
    seconds = Params(params, 1).required(0, "seconds to move forward")
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, int | float)
        or not math.isfinite(seconds)
    ):
        raise invalid_params(f"seconds must be a number, got {seconds!r}")
    if not 0 <= seconds <= MAX_WARP_SECONDS:
        raise invalid_params(
            f"seconds must be from 0 to {MAX_WARP_SECONDS} (time only moves forward)"
        )
    await node.warp(seconds)
    latest = node.bank.blocks.latest
    return {"slot": latest.slot, "unixTimestamp": latest.block_time}


def _account(spec: Any) -> Account:
    if not isinstance(spec, dict):
        raise invalid_params("the account must be an object {lamports, owner, data, executable}")
    lamports = spec.get("lamports", 0)
    if isinstance(lamports, bool) or not isinstance(lamports, int) or not 0 <= lamports < 2**64:
        raise invalid_params(f"lamports must be an integer from 0 to 2^64-1, got {lamports!r}")
    owner = parse_pubkey(spec.get("owner", "11111111111111111111111111111111"))
    data = spec.get("data", ["", "base64"])
    try:
        if isinstance(data, list) and len(data) == 2 and data[1] == "base64":
            raw = b64decode(data[0])
        elif isinstance(data, list) and len(data) == 2 and data[1] == "base58":
            raw = b58decode(data[0])
        else:
            raise ValueError('data must be ["<base64>", "base64"] or ["<base58>", "base58"]')
    except ValueError as exc:
        raise invalid_params(str(exc)) from None
    if len(raw) > MAX_ACCOUNT_BYTES:
        raise invalid_params(f"account data is {len(raw)} bytes; the limit is {MAX_ACCOUNT_BYTES}")
    executable = spec.get("executable", False)
    if not isinstance(executable, bool):
        raise invalid_params("executable must be a boolean")
    return Account(lamports, raw, owner, executable)


async def set_account(node: Node, params: Any) -> bool:
    p = Params(params, 2)
    key = p.pubkey(0)
    account = _account(p.required(1, "the account {lamports, owner, data, executable}"))
    await node.set_accounts([(key, account)])
    return True


async def snapshot(node: Node, params: Any) -> bool:
    """Write a ledger snapshot now (false without --ledger)."""
    Params(params, 0)
    return await node.snapshot()


METHODS = {
    "localnet_warpTime": warp_time,
    "localnet_setAccount": set_account,
    "localnet_snapshot": snapshot,
}
