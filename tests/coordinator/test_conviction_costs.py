"""A conviction costs: points vest before anyone can move them, and a convicted wallet and its node key sit
out conviction_ban_epochs epochs, recorded in the wallet's registry entry (RegistryEntry.banned_until) so the
record outlives the epoch's member list.

The vesting rule: an epoch's points are credited when it ends, to its healthy finishers only, and every
conviction of its members (a dispute's majority, a refuted reporter, an equivocation) is taken before that,
while the epoch runs (Warmup to Cooldown): its checks' seeds are cleared when the next epoch starts and its
disputes lapse when it ends, and an equivocation reported after its end is refused. So a point that can be
claimed, settled or taken out by exit_run is vested: no later conviction could have forfeited it, and claiming
or leaving early saves a cheater nothing."""

from __future__ import annotations

from solders.keypair import Keypair
from support.coordinator_chain import (
    equivocation,
    finish_epoch,
    make_config,
    open_run,
    play_epoch,
    play_round,
    start_epoch,
)

CLIENTS = 4
CONFIG = make_config(CLIENTS, epoch_time=40, conviction_ban_epochs=1)


def second_epoch(chain, core, run):
    """After a first epoch that earned every member points, the second epoch's second round. Returns
    (wallets by epoch index, node keys by epoch index)."""
    members = [chain.wallet() for _ in range(CLIENTS)]
    play_epoch(chain, core, run, members, CONFIG)
    keys = [Keypair() for _ in range(CLIENTS)]
    start_epoch(chain, run, members, CONFIG, keys)
    play_round(chain, core, run, members)
    clients = chain.state(run)["clients"][:CLIENTS]
    by_wallet, by_key = {m.pubkey(): m for m in members}, {k.pubkey(): k for k in keys}
    return [by_wallet[c["signer"]] for c in clients], [by_key[c["p2p_identity"]] for c in clients]


def entry_of(chain, run, wallet) -> dict | None:
    state = chain.state(run)
    return next(
        (e for e in state["registry"][: state["registry_len"]] if e["signer"] == wallet.pubkey()),
        None,
    )


def test_settling_early_saves_a_cheater_nothing_and_honest_points_vest_at_the_epoch_end(
    chain, core
):
    _, run = open_run(chain, CONFIG)
    members, keys = second_epoch(chain, core, run)
    first = entry_of(chain, run, members[0])["earned"]
    assert first > 0 and all(entry_of(chain, run, m)["earned"] == first for m in members)
    cheat, stranger = 2, chain.wallet()
    # anyone settles the cheater's first-epoch points: that epoch is over and no conviction can reach it
    chain.settle_points(stranger, run, members[cheat].pubkey())
    assert chain.points(run, members[cheat].pubkey()) == first
    # this epoch's points are not in the registry yet: nothing to claim, settle or take out early
    assert (
        chain.fails("settle_points", stranger, run, {"wallet": members[cheat].pubkey()})
        == "NoChange"
    )
    chain.send(equivocation(chain, run, keys[cheat], cheat, stranger), [stranger])
    assert chain.state(run)["clients"][cheat]["state"] == "Convicted"
    finish_epoch(chain, core, run, members)
    # the honest members' second epoch vested when it ended: claimable at once; the cheater's was forfeited
    second = entry_of(chain, run, members[0])["earned"] - first
    assert second > 0
    chain.call("claim_points", members[0], run)
    assert chain.points(run, members[0].pubkey()) == first + second
    chain.call("exit_run", members[1], run)
    assert chain.points(run, members[1].pubkey()) == first + second
    assert entry_of(chain, run, members[cheat])["earned"] == 0
    assert chain.points(run, members[cheat].pubkey()) == first
    assert chain.fails("claim_points", members[cheat], run) == "NoChange"


def test_no_conviction_is_taken_once_the_epoch_ended_so_credited_points_are_vested(chain, core):
    """An equivocation of an ended epoch is refused: its points were credited, and a conviction that could
    not take them must not be one that a claim a moment earlier escapes."""
    _, run = open_run(chain, CONFIG)
    members, keys = second_epoch(chain, core, run)
    step, reporter = chain.state(run)["progress"]["step"] - 1, chain.wallet()
    report = equivocation(chain, run, keys[3], 3, reporter, step)
    finish_epoch(chain, core, run, members)
    assert chain.send_fails(report, [reporter], run).name == "InvalidRunState"
    assert chain.state(run)["clients"][3]["state"] == "Healthy"


def test_a_convicted_wallet_and_its_node_key_sit_out_the_ban_then_return(chain, core):
    _, run = open_run(chain, CONFIG)
    members, keys = second_epoch(chain, core, run)
    cheat, reporter = 1, chain.wallet()
    epoch = chain.state(run)["epoch"]["epoch"]
    # it joined the next epoch (with a fresh key) before it was caught: the conviction voids that join
    chain.join(members[cheat], run, Keypair())
    chain.send(equivocation(chain, run, keys[cheat], cheat, reporter), [reporter])
    entry = entry_of(chain, run, members[cheat])
    assert entry["banned_until"] == epoch + 1 + CONFIG["conviction_ban_epochs"]
    assert (
        entry["p2p_identity"] == keys[cheat].pubkey()
    )  # the key it cheated with is the one barred
    assert entry["join_marker"] != chain.state(run)["next_active"]
    # barred: the wallet with any key, the key with any wallet; it cannot leave the record behind either
    assert chain.join_fails(members[cheat], run, Keypair()) == "Banned"
    assert chain.join_fails(chain.wallet(), run, keys[cheat]) == "Banned"
    assert chain.fails("exit_run", members[cheat], run) == "Banned"
    finish_epoch(chain, core, run, members)
    # the next epoch is inside the ban; the record outlives the member list that is rebuilt
    assert chain.join_fails(members[cheat], run, keys[cheat]) == "Banned"
    newcomer = chain.wallet()
    play_epoch(
        chain, core, run, [m for k, m in enumerate(members) if k != cheat] + [newcomer], CONFIG
    )
    assert entry_of(chain, run, members[cheat])["banned_until"] == epoch + 2
    assert all(c["signer"] != members[cheat].pubkey() for c in chain.state(run)["clients"])
    # the ban is over: it joins again, with the same key
    assert chain.state(run)["progress"]["epoch"] == epoch + 2
    chain.join(members[cheat], run, keys[cheat])
    assert entry_of(chain, run, members[cheat])["join_marker"] == chain.state(run)["next_active"]


def test_a_member_that_left_before_its_conviction_is_barred_all_the_same(chain, core):
    """exit_run removed its registry entry; the conviction writes a fresh one to keep the record."""
    _, run = open_run(chain, CONFIG)
    members, keys = second_epoch(chain, core, run)
    cheat, reporter = 0, chain.wallet()
    chain.call("exit_run", members[cheat], run)
    assert entry_of(chain, run, members[cheat]) is None
    chain.send(equivocation(chain, run, keys[cheat], cheat, reporter), [reporter])
    entry = entry_of(chain, run, members[cheat])
    assert (
        entry["banned_until"] > 0
        and entry["earned"] == 0
        and entry["p2p_identity"] == keys[cheat].pubkey()
    )
    assert chain.state(run)["clients"][cheat]["registry_index"] == chain.state(run)[
        "registry"
    ].index(entry)
    assert chain.join_fails(members[cheat], run) == "Banned"
