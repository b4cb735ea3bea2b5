"""Points survive a wallet's registry entry: exit_run, claim_points and (by anyone) settle_points move them
into a Points account (PDA ["points", run, wallet]); a full registry never prunes an entry that still
holds points, close_run refuses while any does, and Points accounts (and JoinAuthorizations) are closed
once their run is."""

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
    events = dict(chain.idl.events_in_logs(list(result.logs()), chain.program_id))
    assert events["PointsClaimed"] == {"run": run, "wallet": members[0].pubkey(), "points": points,
                                       "total": points}  # fmt: skip
    assert (
        chain.points(run, members[0].pubkey()) == points
    )  # the registry entry is gone, the points not
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


def test_a_full_registry_never_prunes_unclaimed_points_and_anyone_can_settle_them(chain):
    """A full registry reuses the oldest entry among wallets that are gone, but never one holding points.
    That let 256 wallets that earned points and never claimed them lock joins for good (the issue's
    attack); now anyone may settle an entry's points into its wallet's Points account (paying its rent),
    and the entry is prunable from then on. The points stay the wallet's."""
    config = make_config(256, min_clients=2, witness_nodes=3, global_batch_size_start=256,
                         global_batch_size_end=256, init_min_clients=250)  # fmt: skip
    authority, run = open_run(chain, config)
    wallets = [chain.wallet() for _ in range(256)]
    for wallet in wallets:
        chain.join(wallet, run)
    chain.call("set_paused", authority, run, {"paused": True})  # every join is void: all prunable
    state = chain.state(run)
    for entry in state["registry"]:
        entry["earned"] = 1
    state["registry"][0]["earned"] = 7
    state["registry"][1]["earned"] = 3
    chain.write_run(run, state)
    chain.call("set_paused", authority, run, {"paused": False})

    newcomer = chain.wallet()
    assert chain.join_fails(newcomer, run) == "RegistryFull"  # every entry holds points
    chain.call("claim_points", wallets[0], run)  # its own claim: the oldest entry without points
    chain.join(newcomer, run)
    signers = [e["signer"] for e in chain.state(run)["registry"]]
    assert wallets[0].pubkey() not in signers and wallets[1].pubkey() in signers
    assert chain.points(run, wallets[0].pubkey()) == 7

    # a stranger settles wallets[2]'s points (it pays the Points account's rent): its entry may go
    late, stranger = chain.wallet(), chain.wallet()
    assert chain.join_fails(late, run) == "RegistryFull"
    balance = chain.svm.get_balance(stranger.pubkey())
    result = chain.settle_points(stranger, run, wallets[2].pubkey())
    rent = chain.svm.get_balance(chain.points_address(run, wallets[2].pubkey()))
    assert chain.svm.get_balance(stranger.pubkey()) == balance - rent
    assert dict(chain.idl.events_in_logs(list(result.logs()), chain.program_id))["PointsClaimed"] == {
        "run": run, "wallet": wallets[2].pubkey(), "points": 1, "total": 1}  # fmt: skip
    chain.join(late, run)
    signers = [e["signer"] for e in chain.state(run)["registry"]]
    assert wallets[2].pubkey() not in signers and wallets[1].pubkey() in signers
    assert chain.points(run, wallets[2].pubkey()) == 1

    # nothing left to settle, a wallet with no entry, and someone else's Points account are refused
    chain.settle_points(stranger, run, wallets[3].pubkey())
    for wallet, points, error in (
        (wallets[3], None, "NoChange"),
        (chain.wallet(), None, "NotAClient"),
        (wallets[4], chain.points_address(run, wallets[3].pubkey()), "WrongPda"),
    ):
        points = points or chain.points_address(run, wallet.pubkey())
        assert (
            chain.fails("settle_points", stranger, run, {"wallet": wallet.pubkey()}, points=points)
            == error
        )


def test_points_and_join_authorizations_are_closed_after_the_run(chain, core):
    """close_run refuses while any entry holds points; once settled and closed, each wallet closes its
    Points account (rent back), and the join authority recorded in a JoinAuthorization closes it."""
    join_authority = chain.wallet()
    authority, run = open_run(chain, CONFIG, join_authority=join_authority.pubkey())
    members = [chain.wallet() for _ in range(4)]
    play_epoch(chain, core, run, members, CONFIG)
    grantee = chain.wallet().pubkey()
    grant = chain.join_authorization_address(run, grantee)
    accounts = {"join_authority": join_authority.pubkey(), "run": run, "authorization": grant}
    chain.send([chain.ix("set_join_authorization", accounts, {"grantee": grantee, "allowed": True})],
               [join_authority])  # fmt: skip
    chain.call("claim_points", members[0], run)
    own = chain.points_address(run, members[0].pubkey())
    assert chain.fails("close_points", members[0], run, points=own) == "RunStillOpen"

    chain.call("set_paused", authority, run, {"paused": True})
    close = {"run_index": chain.run_index_address(b"test-run"), "recipient": authority.pubkey()}
    assert chain.fails("close_run", authority, run, **close) == "PointsUnclaimed"
    for member in members[1:]:
        chain.settle_points(authority, run, member.pubkey())
    chain.call("close_run", authority, run, **close)
    assert chain.account_bytes(run) is None

    # Points: only its own wallet closes it
    assert chain.fails("close_points", members[1], run, points=own) == "WrongPda"
    rent, balance = chain.svm.get_balance(own), chain.svm.get_balance(members[0].pubkey())
    chain.call("close_points", members[0], run, points=own)
    assert chain.account_bytes(own) is None
    assert chain.svm.get_balance(members[0].pubkey()) == balance + rent

    # JoinAuthorization: only the join authority recorded in it (not the run's authority, not a stranger)
    for signer in (authority, chain.wallet()):
        ix = chain.ix("close_join_authorization", accounts | {"join_authority": signer.pubkey()})
        assert chain.send_fails([ix], [signer], grant).name == "Unauthorized"
    rent, balance = chain.svm.get_balance(grant), chain.svm.get_balance(join_authority.pubkey())
    chain.send([chain.ix("close_join_authorization", accounts)], [join_authority])
    assert chain.account_bytes(grant) is None
    assert chain.svm.get_balance(join_authority.pubkey()) == balance + rent
