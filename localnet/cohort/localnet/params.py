"""Reading positional JSON-RPC params with clear -32602 errors."""

from __future__ import annotations

from typing import Any

from solders.pubkey import Pubkey
from solders.signature import Signature

from .errors import MIN_CONTEXT_SLOT_NOT_REACHED, RpcError, invalid_params

API_VERSION = "2.2.0"
COMMITMENTS = {
    "processed",
    "confirmed",
    "finalized",
    "recent",
    "single",
    "singleGossip",
    "root",
    "max",
}


class Params:
    def __init__(self, params: Any, max_len: int) -> None:
        if params is None:
            params = []
        if not isinstance(params, list):
            raise invalid_params("params must be an array")
        if len(params) > max_len:
            raise invalid_params(f"expected at most {max_len} params, got {len(params)}")
        self.items = params

    def get(self, i: int) -> Any:
        return self.items[i] if i < len(self.items) else None

    def required(self, i: int, what: str) -> Any:
        value = self.get(i)
        if value is None:
            raise invalid_params(f"missing param {i}: {what}")
        return value

    def pubkey(self, i: int, what: str = "a base58 account address") -> Pubkey:
        return parse_pubkey(self.required(i, what))

    def signature(self, i: int) -> Signature:
        return parse_signature(self.required(i, "a base58 transaction signature"))

    def integer(self, i: int, what: str, *, required: bool = True, minimum: int = 0) -> int | None:
        value = self.required(i, what) if required else self.get(i)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise invalid_params(
                f"param {i} ({what}) must be an integer >= {minimum}, got {value!r}"
            )
        return value

    def config(self, i: int, current_slot: int) -> dict[str, Any]:
        """The optional config object; checks commitment and minContextSlot like validators do."""
        value = self.get(i)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise invalid_params(
                f"param {i} must be a configuration object, got {type(value).__name__}"
            )
        value = {
            k: v for k, v in value.items() if v is not None
        }  # clients send null for "not given"
        commitment = value.get("commitment")
        if commitment is not None and commitment not in COMMITMENTS:
            raise invalid_params(f"unknown commitment {commitment!r}")
        min_slot = value.get("minContextSlot")
        if min_slot is not None:
            if isinstance(min_slot, bool) or not isinstance(min_slot, int):
                raise invalid_params("minContextSlot must be an integer")
            if min_slot > current_slot:
                raise RpcError(
                    MIN_CONTEXT_SLOT_NOT_REACHED,
                    "Minimum context slot has not been reached",
                    {"contextSlot": current_slot},
                )
        return value


def parse_pubkey(value: Any) -> Pubkey:
    if not isinstance(value, str):
        raise invalid_params(f"expected a base58 address string, got {type(value).__name__}")
    try:
        return Pubkey.from_string(value)
    except ValueError:
        raise invalid_params(
            f"invalid address {value!r}: not a base58 32-byte public key"
        ) from None


def parse_signature(value: Any) -> Signature:
    if not isinstance(value, str):
        raise invalid_params(f"expected a base58 signature string, got {type(value).__name__}")
    try:
        return Signature.from_string(value)
    except ValueError:
        raise invalid_params(
            f"invalid signature {value!r}: not a base58 64-byte signature"
        ) from None


def with_context(slot: int, value: Any) -> dict[str, Any]:
    return {"context": {"apiVersion": API_VERSION, "slot": slot}, "value": value}
