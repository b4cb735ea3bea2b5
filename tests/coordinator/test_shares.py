"""Shares and points follow measured work. A member declares the tokens/s it trains at when it joins; at
Warmup the program turns that into a target share of every round's batch (the median declared throughput
is worth MEDIAN_SHARE, an undeclared one counts as the median) and gives each member the target capped at
the share it proved it delivers (RegistryEntry.proven_share; a newcomer's cap is the median's), clamped to
max_share_ratio of the median either way. Each round whose decided result set names a member is a round it
delivered (Client.delivered); at the epoch's end a healthy finisher earns its share per delivered round,
and its proven share doubles after delivering every decided round, halves after fewer than half (or a
drop), and falls to the lower clamp after a conviction. A slow member then trains less instead of
stretching every round, a fast one earns its way up, and one that overclaims gains nothing."""

from __future__ import annotations

import itertools

import pytest
from support.coordinator_chain import (
    ALL_PARTICIPANTS,
    begin_warmup,
    bitmap,
    by_index,
    make_config,
    open_run,
    play_epoch,
    play_round,
    start_pending_round,
)

from cohort.sdk.models import Run

OVERCLAIM = 10**9  # tokens/s nobody trains at


def shares(chain, run) -> list[int]:
    state = chain.state(run)
    return [c["share"] for c in state["clients"][: state["epoch"]["clients_len"]]]


def joined(chain, run, throughputs: list[int]) -> list:
    members = [chain.wallet() for _ in throughputs]
    for wallet, throughput in zip(members, throughputs, strict=True):
        chain.join(wallet, run, throughput=throughput)
    return members


def entry(chain, run, wallet) -> dict:
    return next(e for e in chain.state(run)["registry"] if e["signer"] == wallet.pubkey())


def prove(chain, run, proven: dict) -> None:
    """Give registry entries a proven share (wallet -> share), as earlier epochs of delivery would."""
    state = chain.state(run)
    for e in state["registry"][: state["registry_len"]]:
        for wallet, share in proven.items():
            if e["signer"] == wallet.pubkey():
                e["proven_share"] = share
    chain.write_run(run, state)


def play_epoch_left_out(chain, core, run, wallets, config, left_out, heights) -> list:
    """`wallets` join and play an epoch to the next WaitingForMembers, with the wallet `left_out` missing
    from the witnesses' participants in the rounds of these heights (and nobody dropping it). Returns the
    members in epoch index order."""
    begin_warmup(chain, run, wallets, config)
    members = by_index(chain, run, wallets)
    out = members.index(left_out)
    for index in range(config["witness_nodes"]):
        chain.call("warmup_witness", members[index], run, {"index": index})
    assert start_pending_round(chain, run, members[0])
    while chain.state(run)["run_state"] == "RoundTrain":
        state = chain.state(run)
        height = state["epoch"]["rounds"][state["epoch"]["rounds_head"]]["height"]
        everyone = range(len(members))
        participants = (
            bitmap([i for i in everyone if i != out]) if height in heights else ALL_PARTICIPANTS
        )
        play_round(chain, core, run, members, participants=participants)
    assert chain.state(run)["run_state"] == "Cooldown"
    chain.advance(config["cooldown_time"])
    chain.call("tick", members[0], run)
    assert chain.state(run)["run_state"] == "WaitingForMembers"
    return members


def decided_rounds(chain, run) -> int:
    state = chain.state(run)
    last = state["epoch"]["rounds"][state["epoch"]["rounds_head"]]
    # every round decided (play_round's witnesses agree), but the first attests the step before the epoch
    assert state["epoch"]["decided_rounds"] == last["height"] > 0
    return state["epoch"]["decided_rounds"]


def test_newcomers_never_start_above_the_median(chain):
    median = chain.idl.constants["MEDIAN_SHARE"]
    _, run = open_run(chain, make_config(6, max_share_ratio=4))
    # median of the declared [50, 100, 200, 400, 100_000] is 200; 0 = undeclared counts as the median
    members = joined(chain, run, [100, 200, 400, 0, 50, 100_000])
    chain.advance(make_config(6)["waiting_for_members_extra_time"])
    chain.call("tick", members[0], run)
    assert chain.state(run)["run_state"] == "Warmup"
    # below the median as declared, never above it: nothing is proven yet
    assert shares(chain, run) == [median // 2, median, median, median, 1, median]


def test_shares_follow_declared_throughput_within_the_proven_share_and_the_ratio(chain):
    median = chain.idl.constants["MEDIAN_SHARE"]
    _, run = open_run(chain, make_config(6, max_share_ratio=4))
    members = joined(chain, run, [100, 200, 400, 0, 50, 100_000])
    # proven: 400 tokens/s gets its whole target (8) under 16; 100_000 gets its proven 8 of its target 16;
    # the median member declared the median (its proven 16 is only a cap); 100 tokens/s (target 2) is
    # held to its proven 1; a proven share beyond the ratio's clamp is clamped (32 -> 16)
    prove(
        chain, run, {members[0]: 1, members[1]: 16, members[2]: 16, members[3]: 32, members[5]: 8}
    )
    chain.advance(make_config(6)["waiting_for_members_extra_time"])
    chain.call("tick", members[0], run)
    assert chain.state(run)["run_state"] == "Warmup"
    assert shares(chain, run) == [1, median, 2 * median, median, 1, 2 * median]


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
    prove(
        chain, run, {members[2]: 16}
    )  # delivered its way up to the ratio's clamp in earlier epochs
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


def test_an_overclaimer_starts_at_the_median_and_earns_as_a_median_member(chain, core):
    median = chain.idl.constants["MEDIAN_SHARE"]
    config = make_config(4, epoch_time=40)
    _, run = open_run(chain, config)
    wallets = [chain.wallet() for _ in range(4)]
    play_epoch(chain, core, run, wallets, config, throughputs=[200, 200, 200, OVERCLAIM])
    assert shares(chain, run) == [median] * 4  # its batch is the median's: it stretches no round
    rounds = decided_rounds(chain, run)
    assert [c["delivered"] for c in chain.state(run)["clients"][:4]] == [rounds] * 4
    assert [entry(chain, run, w)["earned"] for w in wallets] == [rounds * median] * 4


def test_delivering_every_round_doubles_the_proven_share_up_to_the_ratio(chain, core):
    median = chain.idl.constants["MEDIAN_SHARE"]
    config = make_config(4, epoch_time=40, max_share_ratio=4)
    _, run = open_run(chain, config)
    wallets = [chain.wallet() for _ in range(4)]
    fast = wallets[3]
    earned = 0
    for epoch_shares, proven in (
        ([median] * 4, 2 * median),
        ([median] * 3 + [2 * median], 4 * median),
        ([median] * 3 + [4 * median], 4 * median),  # the ratio's clamp: 4 x the median
    ):
        play_epoch(chain, core, run, wallets, config, throughputs=[200, 200, 200, OVERCLAIM])
        assert shares(chain, run) == epoch_shares
        # the median members delivered everything too: their cap doubled, their median target holds them
        assert [entry(chain, run, w)["proven_share"] for w in wallets] == [2 * median] * 3 + [
            proven
        ]
        earned += decided_rounds(chain, run) * epoch_shares[3]
        assert entry(chain, run, fast)["earned"] == earned
    # the SDK reads both from the chain
    decoded = Run.decode(run, chain.run_bytes(run), chain.idl)
    assert {e.proven_share for e in decoded.registry} == {2 * median, 4 * median}
    assert {c.delivered for c in decoded.clients} == {decided_rounds(chain, run)}


def test_a_member_left_out_of_most_rounds_halves_its_proven_share(chain, core):
    median = chain.idl.constants["MEDIAN_SHARE"]
    config = make_config(4, epoch_time=40)
    _, run = open_run(chain, config)
    wallets = [chain.wallet() for _ in range(4)]
    slow = wallets[1]
    # the decided sets name it in the epoch's second round only (the first attests the step before it)
    members = play_epoch_left_out(chain, core, run, wallets, config, slow, heights=range(2, 100))
    assert decided_rounds(chain, run) >= 3  # it delivered one: fewer than half
    assert chain.state(run)["clients"][members.index(slow)]["delivered"] == 1
    earned = entry(chain, run, slow)["earned"]
    assert earned == median and entry(chain, run, slow)["proven_share"] == median // 2
    # its next share is the halved cap, whatever it declares; delivering everything doubles it back
    play_epoch(chain, core, run, wallets, config, throughputs=[200, OVERCLAIM, 200, 200])
    by_signer = {c["signer"]: c["share"] for c in chain.state(run)["clients"][:4]}
    assert by_signer[slow.pubkey()] == median // 2
    assert entry(chain, run, slow)["proven_share"] == median
    assert entry(chain, run, slow)["earned"] == earned + decided_rounds(chain, run) * median // 2


def test_points_are_delivered_rounds_times_share(chain, core):
    median = chain.idl.constants["MEDIAN_SHARE"]
    config = make_config(4, epoch_time=40)
    _, run = open_run(chain, config)
    wallets = [chain.wallet() for _ in range(4)]
    gappy = wallets[2]
    left_out = {1, 3}  # two rounds' decided sets leave it out (nobody drops it)
    members = play_epoch_left_out(chain, core, run, wallets, config, gappy, heights=left_out)
    rounds = decided_rounds(chain, run)
    assert rounds >= 2 * len(
        left_out
    )  # it delivered at least half: its proven share stays its share
    delivered = [c["delivered"] for c in chain.state(run)["clients"][:4]]
    assert delivered == [rounds - len(left_out) if m == gappy else rounds for m in members]
    earned = {w: entry(chain, run, w)["earned"] for w in wallets}
    assert all(earned[w] == rounds * median for w in wallets if w != gappy)
    assert earned[gappy] == rounds * median - len(left_out) * median
    proven = {w: entry(chain, run, w)["proven_share"] for w in wallets}
    assert proven[gappy] == median and all(proven[w] == 2 * median for w in wallets if w != gappy)


def test_a_dropped_member_earns_nothing_and_halves_its_proven_share(chain, core):
    median = chain.idl.constants["MEDIAN_SHARE"]
    config = make_config(4, epoch_time=40)
    _, run = open_run(chain, config)
    wallets = [chain.wallet() for _ in range(4)]
    begin_warmup(chain, run, wallets, config)
    members = by_index(chain, run, wallets)
    for index in range(config["witness_nodes"]):
        chain.call("warmup_witness", members[index], run, {"index": index})
    assert start_pending_round(chain, run, members[0])
    play_round(chain, core, run, members)
    play_round(chain, core, run, members, participants=bitmap([0, 1, 2]))  # attests height 0: not 3
    state = chain.state(run)
    step = (
        state["epoch"]["start_step"]
        + state["epoch"]["rounds"][state["epoch"]["rounds_head"]]["height"]
        - 2
    )
    chain.call(
        "health_check", members[0], run, {"step": step, "count": 1, "indices": [3] + [0] * 31}
    )
    assert chain.state(run)["clients"][3]["state"] == "Dropped"
    while chain.state(run)["run_state"] == "RoundTrain":
        play_round(chain, core, run, members, participants=bitmap([0, 1, 2]), all_elected=False)
    chain.advance(config["cooldown_time"])
    chain.call("tick", members[0], run)
    assert chain.state(run)["run_state"] == "WaitingForMembers"
    assert entry(chain, run, members[3])["earned"] == 0
    assert entry(chain, run, members[3])["proven_share"] == median // 2
    assert entry(chain, run, members[0])["proven_share"] == 2 * median


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
