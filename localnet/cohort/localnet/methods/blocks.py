"""Blocks: getBlock, getBlocks, getBlocksWithLimit, getBlockTime, getBlockCommitment."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..encode_tx import TRANSACTION_DETAILS, check_max_version, check_tx_encoding, encode_block
from ..errors import BLOCK_NOT_AVAILABLE, SLOT_SKIPPED, RpcError, invalid_params
from ..params import Params

if TYPE_CHECKING:
    from ..blocks import Block
    from ..node import Node

MAX_BLOCK_RANGE = 500_000


def _block(node: Node, slot: int) -> Block:
    block = node.bank.blocks.get(slot)
    if block is not None:
        return block
    if slot > node.bank.slot:
        raise RpcError(BLOCK_NOT_AVAILABLE, f"Block not available for slot {slot}")
    raise RpcError(
        SLOT_SKIPPED, f"Slot {slot} was skipped, or missing due to ledger jump to recent snapshot"
    )


def get_block(node: Node, params: Any) -> dict[str, Any]:
    p = Params(params, 2)
    slot = p.integer(0, "slot")
    config = p.get(1)
    if isinstance(config, str):
        config = {"encoding": config}
    config = Params([config], 1).config(0, node.bank.slot)
    encoding = check_tx_encoding(config.get("encoding", "json"))
    details = config.get("transactionDetails", "full")
    if details not in TRANSACTION_DETAILS:
        raise invalid_params(f"transactionDetails must be one of {', '.join(TRANSACTION_DETAILS)}")
    rewards = config.get("rewards", True)
    max_version = check_max_version(config.get("maxSupportedTransactionVersion"))
    block = _block(node, slot)
    history = node.bank.history
    records = [history.by_signature[s] for s in block.signatures]
    return encode_block(block, records, encoding, details, bool(rewards), max_version)


def get_blocks(node: Node, params: Any) -> list[int]:
    p = Params(params, 3)
    start = p.integer(0, "start slot")
    end = p.get(1)
    if isinstance(end, dict):  # getBlocks(start, config)
        end = None
    elif end is not None:
        end = p.integer(1, "end slot")
    end = node.bank.slot if end is None else min(end, node.bank.slot)
    if end - start > MAX_BLOCK_RANGE:
        raise invalid_params(f"Slot range too large; max {MAX_BLOCK_RANGE}")
    return node.bank.blocks.slots_between(start, end)


def get_blocks_with_limit(node: Node, params: Any) -> list[int]:
    p = Params(params, 3)
    start = p.integer(0, "start slot")
    limit = p.integer(1, "limit")
    if limit > MAX_BLOCK_RANGE:
        raise invalid_params(f"Limit too large; max {MAX_BLOCK_RANGE}")
    return node.bank.blocks.slots_between(start, node.bank.slot, limit)


def get_block_time(node: Node, params: Any) -> int:
    slot = Params(params, 1).integer(0, "slot")
    return _block(node, slot).block_time


def get_block_commitment(node: Node, params: Any) -> dict[str, Any]:
    Params(params, 1).integer(0, "slot")
    return {"commitment": None, "totalStake": 0}


METHODS = {
    "getBlock": get_block,
    "getBlocks": get_blocks,
    "getBlocksWithLimit": get_blocks_with_limit,
    "getBlockTime": get_block_time,
    "getBlockCommitment": get_block_commitment,
}
