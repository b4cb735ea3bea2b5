"""Adaptive shares: a member declares the tokens/s it trains at when it joins; at Warmup the program gives
each epoch member a share of every round's batch in proportion to it (the median declared throughput is
worth MEDIAN_SHARE, an undeclared one counts as the median), clamped to max_share_ratio of the median
either way, and points follow the share. A slow member then trains less instead of stretching every
round, and a fast one is not idle half of it."""

from __future__ import annotations

import itertools

import pytest
from support.coordinator_chain import make_config, open_run, play_epoch


def shares(chain, run) -> list[int]:
    state = chain.state(run)
    return [c["share"] for c in state["clients"][: state["epoch"]["clients_len"]]]


def joined(chain, run, throughputs: list[int]) -> list:
    members = [chain.wallet() for _ in throughputs]
    for wallet, throughput in zip(members, throughputs, strict=True):
        chain.join(wallet, run, throughput=throughput)
    return members


def test_shares_follow_declared_throughput_within_the_ratio(chain):
    median = chain.idl.constants["MEDIAN_SHARE"]
    _, run = open_run(chain, make_config(6, max_share_ratio=4))
    # median of the declared [50, 100, 200, 400, 100_000] is 200; 0 = undeclared counts as the median
    members = joined(chain, run, [100, 200, 400, 0, 50, 100_000])
    chain.advance(make_config(6)["waiting_for_members_extra_time"])
    chain.call("tick", members[0], run)
    assert chain.state(run)["run_state"] == "Warmup"
    assert shares(chain, run) == [median // 2, median, 2 * median, median, 1, 4 * median]


def test_a_ratio_of_one_gives_everyone_the_same_share(chain):
    median = chain.idl.constants["MEDIAN_SHARE"]
    config = make_config(4, max_share_ratio=1)
    _, run = open_run(chain, config)
    members = joined(chain, run, [10, 1000, 0, 5])
    chain.advance(config["waiting_for_members_extra_time"])
    chain.call("tick", members[0], run)
    assert shares(chain, run) == [median] * 4


def test_the_batch_is_split_by_share_and_covers_it_exactly(chain, core):
    config = make_config(4, global_batch_size_start=32, global_batch_size_end=32)
    _, run = open_run(chain, config)
    members = joined(chain, run, [100, 100, 400, 25])
    chain.advance(config["waiting_for_members_extra_time"])
    chain.call("tick", members[0], run)
    for index in range(config["witness_nodes"]):
        chain.call("warmup_witness", members[index], run, {"index": index})
    chain.next_slot()
    chain.call("tick", members[0], run)
    state = chain.state(run)
    assert state["run_state"] == "RoundTrain"
    data = chain.run_bytes(run)[8:]
    batches = core.assignment(data, core.round_bytes(data))
    round_ = state["epoch"]["rounds"][state["epoch"]["rounds_head"]]
    spans = sorted(batches.values())
    # contiguous, no gap and no overlap, exactly the round's batch
    assert spans[0][0] == round_["data_index"] and spans[-1][1] == round_["data_index"] + 32
    assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))
    sizes = {index: end - start for index, (start, end) in batches.items()}
    # shares 4, 4, 16, 1 (of 25): one sequence each, the other 28 in proportion, the remainder to the first
    assert sizes[2] > 2 * sizes[0] and sizes[3] < sizes[0] and min(sizes.values()) >= 1
    assert abs(sizes[2] - 1 - 28 * 16 / 25) <= 1 and abs(sizes[0] - sizes[1]) <= 1


def test_points_are_rounds_times_share(chain, core):
    median = chain.idl.constants["MEDIAN_SHARE"]
    config = make_config(4, epoch_time=60)
    _, run = open_run(chain, config)
    wallets = [chain.wallet() for _ in range(4)]
    play_epoch(chain, core, run, wallets, config, throughputs=[200, 200, 400, 100])
    state = chain.state(run)
    last = state["epoch"]["rounds"][state["epoch"]["rounds_head"]]
    rounds = last["height"] + 1  # counted as in test_lifecycle
    entries = {e["signer"]: e["earned"] for e in state["registry"]}
    earned = [entries[w.pubkey()] for w in wallets]
    assert rounds > 0 and earned == [rounds * s for s in (median, median, 2 * median, median // 2)]


@pytest.mark.parametrize("ratio", [0, 17])
def test_the_ratio_must_be_1_to_16(chain, ratio):
    authority = chain.wallet()
    run = chain.create_run(authority)
    failure = chain.failure("update_config", authority, run,
                            {"config": make_config(4, max_share_ratio=ratio),
                             "progress": {"epoch": 0, "step": 0, "epoch_start_data_index": 0}})  # fmt: skip
    assert failure.name == "ConfigInvalid" and "max_share_ratio must be 1..16" in str(failure)


def test_join_padding_must_be_zero(chain):
    _, run = open_run(chain, make_config(4))
    wallet = chain.wallet()
    ixs = chain.join_ixs(wallet, run)
    data = bytearray(ixs[1].data)
    data[-1] = 1  # the pad after throughput
    ixs[1] = type(ixs[1])(ixs[1].program_id, bytes(data), ixs[1].accounts)
    assert chain.send_fails(ixs, [wallet], run).name == "NonCanonical"


def test_declared_throughput_is_kept_in_the_registry(chain):
    _, run = open_run(chain, make_config(4))
    (wallet,) = joined(chain, run, [1234])
    entry = next(e for e in chain.state(run)["registry"] if e["signer"] == wallet.pubkey())
    assert entry["throughput"] == 1234
