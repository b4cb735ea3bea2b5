"""Points survive a wallet's registry entry: exit_run and claim_points move them into a Points account
(PDA ["points", run, wallet]), and a full registry never prunes an entry that still holds points."""

from __future__ import annotations

from solders.keypair import Keypair
from support.coordinator_chain import make_config, open_run, play_epoch

CONFIG = make_config(4, epoch_time=60)


def earned(chain, run, wallet) -> int:
    state = chain.state(run)
    entries = state["registry"][: state["registry_len"]]
    return next((e["earned"] for e in entries if e["signer"] == wallet.pubkey()), 0)


def test_points_are_kept_after_exit_and_claims_accumulate(chain, core):
    _, run = open_run(chain, CONFIG)
    members = [chain.wallet() for _ in range(4)]
    play_epoch(chain, core, run, members, CONFIG)
    points = earned(chain, run, members[0])
    assert points > 0 and chain.points(run, members[0].pubkey()) is None
    result = chain.call("exit_run", members[0], run)
    events = dict(chain.idl.events_in_logs(list(result.logs())))
    assert events["PointsClaimed"] == {"run": run, "wallet": members[0].pubkey(), "points": points,
                                       "total": points}  # fmt: skip
    assert chain.points(run, members[0].pubkey()) == points  # the registry entry is gone, the points not
    assert chain.fails("claim_points", members[0], run) == "NotAClient"
    # a claim while staying in the run; nothing left to claim is a refused no-op
    chain.call("claim_points", members[1], run)
    assert chain.points(run, members[1].pubkey()) == points and earned(chain, run, members[1]) == 0
    assert chain.fails("claim_points", members[1], run) == "NoChange"
    # the next epoch's points are added to the same account
    play_epoch(chain, core, run, [*members[1:], chain.wallet()], CONFIG)
    more = earned(chain, run, members[1])
    chain.call("exit_run", members[1], run)
    assert chain.points(run, members[1].pubkey()) == points + more


def test_the_points_account_must_be_the_wallets_own(chain, core):
    _, run = open_run(chain, CONFIG)
    members = [chain.wallet() for _ in range(4)]
    play_epoch(chain, core, run, members, CONFIG)
    chain.call("claim_points", members[0], run)
    someone_elses = chain.points_address(run, members[0].pubkey())
    assert chain.fails("claim_points", members[1], run, points=someone_elses) == "WrongPda"
    assert chain.fails("exit_run", members[1], run, points=Keypair().pubkey()) == "WrongPda"
    assert chain.fails("claim_points", members[1], run, system_program=run) == "WrongProgram"


def test_a_full_registry_never_prunes_unclaimed_points(chain):
    """A full registry reuses the oldest entry among wallets that are gone — but not one holding points:
    its wallet claims first, and only then may the entry go (the points stay in its Points account)."""
    config = make_config(256, min_clients=1, witness_nodes=1, global_batch_size_start=256,
                         global_batch_size_end=256, init_min_clients=250)  # fmt: skip
    authority, run = open_run(chain, config)
    wallets = [chain.wallet() for _ in range(256)]
    for wallet in wallets:
        chain.join(wallet, run)
    chain.call("set_paused", authority, run, {"paused": True})  # every join is void: all prunable
    state = chain.state(run)
    state["registry"][0]["earned"] = 7  # the two oldest entries earned points in some epoch
    state["registry"][1]["earned"] = 3
    chain.write_run(run, state)
    chain.call("set_paused", authority, run, {"paused": False})

    newcomer = chain.wallet()
    chain.join(newcomer, run)  # prunes wallets[2], the oldest without points
    signers = [e["signer"] for e in chain.state(run)["registry"]]
    assert wallets[0].pubkey() in signers and wallets[1].pubkey() in signers
    assert wallets[2].pubkey() not in signers
    chain.call("claim_points", wallets[0], run)
    chain.join(chain.wallet(), run)  # now wallets[0] is the oldest without points
    signers = [e["signer"] for e in chain.state(run)["registry"]]
    assert wallets[0].pubkey() not in signers and wallets[1].pubkey() in signers
    assert chain.points(run, wallets[0].pubkey()) == 7
