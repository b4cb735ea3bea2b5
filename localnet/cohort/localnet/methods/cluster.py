"""Cluster and time: health, version, identity, slots, epochs, blockhashes, fees, supply, performance."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from solders.message import from_bytes_versioned

from ..clock import SLOTS_PER_EPOCH, epoch_of
from ..codec import b64decode
from ..errors import invalid_params
from ..params import API_VERSION, Params, with_context

if TYPE_CHECKING:
    from ..node import Node

FEATURE_SET = 3294202862  # reported by getVersion; clients only display it


def get_health(node: Node, params: Any) -> str:
    Params(params, 0)
    return "ok"


def get_version(node: Node, params: Any) -> dict[str, Any]:
    Params(params, 0)
    return {"feature-set": FEATURE_SET, "solana-core": API_VERSION}


def get_genesis_hash(node: Node, params: Any) -> str:
    Params(params, 0)
    return node.bank.genesis_hash


def get_identity(node: Node, params: Any) -> dict[str, str]:
    Params(params, 0)
    return {"identity": str(node.bank.identity.pubkey())}


def _slot(node: Node, params: Any) -> int:
    Params(params, 1).config(0, node.bank.slot)
    return node.bank.slot


def get_epoch_info(node: Node, params: Any) -> dict[str, int]:
    slot = _slot(node, params)
    epoch, index = epoch_of(slot)
    return {
        "absoluteSlot": slot,
        "blockHeight": slot,
        "epoch": epoch,
        "slotIndex": index,
        "slotsInEpoch": SLOTS_PER_EPOCH,
        "transactionCount": node.bank.transaction_count,
    }


def get_epoch_schedule(node: Node, params: Any) -> dict[str, Any]:
    Params(params, 0)
    return {
        "firstNormalEpoch": 0,
        "firstNormalSlot": 0,
        "leaderScheduleSlotOffset": SLOTS_PER_EPOCH,
        "slotsPerEpoch": SLOTS_PER_EPOCH,
        "warmup": False,
    }


def get_latest_blockhash(node: Node, params: Any) -> dict[str, Any]:
    Params(params, 1).config(0, node.bank.slot)
    blockhash, last_valid = node.bank.latest_blockhash()
    return with_context(
        node.bank.slot, {"blockhash": blockhash, "lastValidBlockHeight": last_valid}
    )


def is_blockhash_valid(node: Node, params: Any) -> dict[str, Any]:
    p = Params(params, 2)
    blockhash = p.required(0, "a base58 blockhash")
    if not isinstance(blockhash, str):
        raise invalid_params("the blockhash must be a base58 string")
    p.config(1, node.bank.slot)
    return with_context(node.bank.slot, node.bank.blocks.blockhash_slot(blockhash) is not None)


def get_fee_for_message(node: Node, params: Any) -> dict[str, Any]:
    p = Params(params, 2)
    encoded = p.required(0, "a base64 encoded message")
    p.config(1, node.bank.slot)
    try:
        message = from_bytes_versioned(b64decode(encoded))
    except (ValueError, TypeError) as exc:
        raise invalid_params(f"invalid message: {exc}") from None
    fee = None
    if node.bank.blocks.blockhash_slot(str(message.recent_blockhash)) is not None:
        fee = node.bank.fee_for_message(message.header.num_required_signatures)
    return with_context(node.bank.slot, fee)


def get_minimum_balance_for_rent_exemption(node: Node, params: Any) -> int:
    p = Params(params, 2)
    size = p.integer(0, "account data length")
    if size > 10 * 1024 * 1024:
        raise invalid_params(f"data length {size} exceeds the 10 MiB account limit")
    p.config(1, node.bank.slot)
    return node.bank.svm.minimum_balance_for_rent_exemption(size)


def get_transaction_count(node: Node, params: Any) -> int:
    Params(params, 1).config(0, node.bank.slot)
    return node.bank.transaction_count


def get_supply(node: Node, params: Any) -> dict[str, Any]:
    Params(params, 1).config(0, node.bank.slot)
    total = sum(node.bank.svm.get_balance(k) or 0 for k in node.bank.written)
    value = {
        "circulating": total,
        "nonCirculating": 0,
        "nonCirculatingAccounts": [],
        "total": total,
    }
    return with_context(node.bank.slot, value)


def get_vote_accounts(node: Node, params: Any) -> dict[str, list]:
    Params(params, 1).config(0, node.bank.slot)
    return {"current": [], "delinquent": []}


def get_recent_performance_samples(node: Node, params: Any) -> list[dict[str, int]]:
    limit = Params(params, 1).integer(0, "limit", required=False)
    limit = 720 if limit is None else limit
    if limit > 720:
        raise invalid_params("limit must be at most 720")
    return node.performance.samples(limit)


def get_slot_leader(node: Node, params: Any) -> str:
    Params(params, 1).config(0, node.bank.slot)
    return str(node.bank.identity.pubkey())


def get_slot_leaders(node: Node, params: Any) -> list[str]:
    p = Params(params, 2)
    p.integer(0, "start slot")
    limit = p.integer(1, "limit")
    if limit > 5000:
        raise invalid_params("limit must be at most 5000")
    return [str(node.bank.identity.pubkey())] * limit


def get_inflation_reward(node: Node, params: Any) -> list[None]:
    p = Params(params, 2)
    addresses = p.required(0, "an array of addresses")
    if not isinstance(addresses, list):
        raise invalid_params("param 0 must be an array of addresses")
    return [None] * len(addresses)


def get_max_slot(node: Node, params: Any) -> int:
    Params(params, 0)
    return node.bank.slot


def get_first_available_block(node: Node, params: Any) -> int:
    Params(params, 0)
    return node.bank.blocks.first_slot


def get_stake_minimum_delegation(node: Node, params: Any) -> dict[str, Any]:
    Params(params, 1).config(0, node.bank.slot)
    return with_context(node.bank.slot, 1_000_000_000)


def get_recent_prioritization_fees(node: Node, params: Any) -> list:
    Params(params, 1)
    return []


def get_cluster_nodes(node: Node, params: Any) -> list[dict[str, Any]]:
    Params(params, 0)
    return [
        {
            "featureSet": FEATURE_SET,
            "gossip": None,
            "pubkey": str(node.bank.identity.pubkey()),
            "rpc": node.rpc_address,
            "shredVersion": 0,
            "tpu": None,
            "version": API_VERSION,
        }
    ]


def localnet_traffic(node: Node, params: Any) -> dict[str, int]:
    """What this node served so far (requests, bytes, notifications) and transactions it processed."""
    return {**node.traffic.as_dict(), "transactions": node.bank.transaction_count}


METHODS = {
    "localnet_traffic": localnet_traffic,
    "getHealth": get_health,
    "getVersion": get_version,
    "getGenesisHash": get_genesis_hash,
    "getIdentity": get_identity,
    "getSlot": _slot,
    "getBlockHeight": _slot,
    "getEpochInfo": get_epoch_info,
    "getEpochSchedule": get_epoch_schedule,
    "getLatestBlockhash": get_latest_blockhash,
    "isBlockhashValid": is_blockhash_valid,
    "getFeeForMessage": get_fee_for_message,
    "getMinimumBalanceForRentExemption": get_minimum_balance_for_rent_exemption,
    "getTransactionCount": get_transaction_count,
    "getSupply": get_supply,
    "getVoteAccounts": get_vote_accounts,
    "getRecentPerformanceSamples": get_recent_performance_samples,
    "getSlotLeader": get_slot_leader,
    "getSlotLeaders": get_slot_leaders,
    "getInflationReward": get_inflation_reward,
    "getFirstAvailableBlock": get_first_available_block,
    "minimumLedgerSlot": get_first_available_block,
    "getMaxRetransmitSlot": get_max_slot,
    "getMaxShredInsertSlot": get_max_slot,
    "getStakeMinimumDelegation": get_stake_minimum_delegation,
    "getRecentPrioritizationFees": get_recent_prioritization_fees,
    "getClusterNodes": get_cluster_nodes,
}
