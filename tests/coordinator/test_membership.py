"""Who takes part, on chain: exit_run mid-epoch and in Warmup, joins under the Authorized policy (the
JoinAuthorization PDA ["join", run, grantee]) and the per-epoch capacity (RunFull). A full registry,
its pruning and exit_run freeing a slot in it are in test_psyche_fixes.py."""

from __future__ import annotations

import pytest
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.system_program import TransferParams, transfer
from support.coordinator_chain import (
    ProgramFailed,
    begin_warmup,
    bitmap,
    make_config,
    open_run,
    play_round,
    start_epoch,
    start_pending_round,
)

NO_REGISTRY = 0xFFFF


def registry_signers(state) -> list[Pubkey]:
    return [entry["signer"] for entry in state["registry"][: state["registry_len"]]]


def pending_signers(state) -> list[Pubkey]:
    registry = state["registry"][: state["registry_len"]]
    return [e["signer"] for e in registry if e["join_marker"] == state["next_active"]]


# --------------------------------------------------------------------------------------------------
# exit_run


def test_exit_mid_epoch_withdraws_the_client_and_frees_its_registry_slot(chain, core):
    config = make_config(4)
    _, run = open_run(chain, config)
    members = [chain.wallet() for _ in range(4)]
    start_epoch(chain, run, members, config)
    play_round(chain, core, run, members)
    before = chain.state(run)
    assert registry_signers(before) == [m.pubkey() for m in members]

    meta = chain.call("exit_run", members[1], run)
    assert chain.idl.events_in_logs(list(meta.logs()), chain.program_id) == [
        ("ClientExited", {"run": run, "signer": members[1].pubkey()})
    ]
    state = chain.state(run)
    assert state["nonce"] == before["nonce"] + 1
    # the last registry entry took the freed slot, and its epoch client follows it
    assert registry_signers(state) == [
        members[0].pubkey(),
        members[3].pubkey(),
        members[2].pubkey(),
    ]
    empty = {
        "signer": Pubkey.default(),
        "p2p_identity": Pubkey.default(),
        "earned": 0,
        "join_marker": 0,
        "throughput": 0,
        "banned_until": 0,
        "proven_share": 0,
        "_pad": bytes(6),
    }
    assert state["registry"][3] == empty
    clients = state["clients"]
    assert clients[1]["state"] == "Withdrawn" and clients[1]["exited_height"] == 1
    assert [c["registry_index"] for c in clients[:4]] == [0, NO_REGISTRY, 2, 1]
    assert state["run_state"] == "RoundTrain"

    # it cannot leave twice; the next two rounds' trainers were frozen before it left (it is among them,
    # without a seat), and it trains no more from the round after those
    assert chain.fails("exit_run", members[1], run) == "NotAClient"
    assert state["next_mask"] == state["seed_mask"] == bitmap(range(4))
    for active, following in ((range(4), range(4)), (range(4), [0, 2, 3]), ([0, 2, 3], [0, 2, 3])):
        play_round(chain, core, run, members, all_elected=False)
        state = chain.state(run)
        assert state["epoch"]["rounds"][state["epoch"]["rounds_head"]]["active_mask"] == bitmap(
            active
        )
        assert state["next_mask"] == bitmap(following)
    assert state["epoch"]["rounds"][state["epoch"]["rounds_head"]]["active_count"] == 3

    # it may come back for the next epoch, in a new registry slot
    chain.join(members[1], run)
    assert registry_signers(chain.state(run))[3] == members[1].pubkey()


def test_exit_in_warmup_below_min_clients_falls_back_to_waiting_for_members(chain):
    config = make_config(2, min_clients=2, witness_nodes=2)
    _, run = open_run(chain, config)
    members = [chain.wallet() for _ in range(2)]
    begin_warmup(chain, run, members, config)

    chain.call("exit_run", members[0], run)
    state = chain.state(run)
    assert state["run_state"] == "WaitingForMembers"
    assert {c["state"] for c in state["clients"][:2]} == {"Withdrawn"}
    # the one who stayed is still pending; once the other joins again the epoch restarts
    assert pending_signers(state) == [members[1].pubkey()]
    chain.join(members[0], run)
    chain.advance(config["waiting_for_members_extra_time"])
    chain.call("tick", members[0], run)
    state = chain.state(run)
    assert state["run_state"] == "Warmup" and state["epoch"]["clients_len"] == 2


def test_exit_while_waiting_withdraws_the_pending_join(chain):
    _, run = open_run(chain, make_config(3))
    a, b = chain.wallet(), chain.wallet()
    chain.join(a, run)
    chain.join(b, run)
    chain.call("exit_run", a, run)
    state = chain.state(run)
    assert state["run_state"] == "WaitingForMembers"
    assert pending_signers(state) == [b.pubkey()] and state["registry_len"] == 1
    assert chain.fails("exit_run", chain.wallet(), run) == "NotAClient"


# --------------------------------------------------------------------------------------------------
# authorized joins


def authorize(chain, join_authority: Keypair, run: Pubkey, grantee: Pubkey, allowed: bool = True):
    address = chain.join_authorization_address(run, grantee)
    accounts = {"join_authority": join_authority.pubkey(), "run": run, "authorization": address}
    ix = chain.ix("set_join_authorization", accounts, {"grantee": grantee, "allowed": allowed})
    chain.send([ix], [join_authority])
    return address


@pytest.fixture
def gated(chain):
    """An Authorized run whose join authority is not its authority: (join_authority, run)."""
    join_authority = chain.wallet()
    config = make_config(4, join_policy="Authorized")
    chain.run_authority, run = open_run(chain, config, join_authority=join_authority.pubkey())
    return join_authority, run


def test_authorized_wallet_joins(chain, gated):
    join_authority, run = gated
    grantee = chain.wallet()
    address = authorize(chain, join_authority, run, grantee.pubkey())
    auth = chain.idl.decode_account("JoinAuthorization", chain.account_bytes(address))
    bump = Pubkey.find_program_address(
        [b"join", bytes(run), bytes(grantee.pubkey())], chain.program_id
    )[1]
    assert auth == {
        "bump": bump,
        "allowed": True,
        "_pad": bytes(6),
        "run": run,
        "grantee": grantee.pubkey(),
        "join_authority": join_authority.pubkey(),  # who may close it, even after the run is closed
    }
    chain.join(grantee, run, authorization=address)
    assert pending_signers(chain.state(run)) == [grantee.pubkey()]


def test_unauthorized_wallets_cannot_join(chain, gated):
    join_authority, run = gated
    grantee, stranger = chain.wallet(), chain.wallet()
    granted = authorize(chain, join_authority, run, grantee.pubkey())
    # no authorization account at its address, the run itself, or someone else's authorization
    own = chain.join_authorization_address(run, stranger.pubkey())
    for account in (own, run, granted, Pubkey.default()):
        assert chain.join_fails(stranger, run, authorization=account) == "JoinNotAuthorized"


def test_revoked_authorization_no_longer_admits(chain, gated):
    join_authority, run = gated
    wallet = chain.wallet()
    address = authorize(chain, join_authority, run, wallet.pubkey())
    authorize(chain, join_authority, run, wallet.pubkey(), allowed=False)
    assert not chain.idl.decode_account("JoinAuthorization", chain.account_bytes(address))[
        "allowed"
    ]
    assert chain.join_fails(wallet, run, authorization=address) == "JoinNotAuthorized"
    authorize(chain, join_authority, run, wallet.pubkey())  # granted again
    chain.join(wallet, run, authorization=address)


def test_revoking_withdraws_a_pending_join(chain, gated):
    join_authority, run = gated
    wallet, other = chain.wallet(), chain.wallet()
    address = authorize(chain, join_authority, run, wallet.pubkey())
    chain.join(wallet, run, authorization=address)
    chain.join(other, run, authorization=authorize(chain, join_authority, run, other.pubkey()))
    nonce = chain.state(run)["nonce"]
    authorize(chain, join_authority, run, wallet.pubkey(), allowed=False)
    state = chain.state(run)
    assert pending_signers(state) == [other.pubkey()]  # it would otherwise enter the next epoch
    assert state["nonce"] == nonce + 1


def test_the_system_program_account_is_checked(chain, gated):
    join_authority, run = gated
    grantee = chain.wallet().pubkey()
    accounts = {"join_authority": join_authority.pubkey(), "run": run,
                "authorization": chain.join_authorization_address(run, grantee), "system_program": run}  # fmt: skip
    ix = chain.ix("set_join_authorization", accounts, {"grantee": grantee, "allowed": True})
    with pytest.raises(ProgramFailed) as e:
        chain.send([ix], [join_authority])
    assert e.value.name == "WrongProgram"


def test_authorization_for_another_run_is_rejected(chain, gated):
    join_authority, run = gated
    other = chain.create_run(
        chain.wallet(), run_id=b"other-run", join_authority=join_authority.pubkey()
    )
    wallet = chain.wallet()
    elsewhere = authorize(chain, join_authority, other, wallet.pubkey())
    assert chain.join_fails(wallet, run, authorization=elsewhere) == "JoinNotAuthorized"


def test_only_the_join_authority_grants_at_the_derived_address(chain, gated):
    join_authority, run = gated
    grantee = chain.wallet().pubkey()
    address = chain.join_authorization_address(run, grantee)
    args = {"grantee": grantee, "allowed": True}
    for signer in (chain.wallet(), chain.run_authority):  # a stranger, the run's (other) authority
        accounts = {"join_authority": signer.pubkey(), "run": run, "authorization": address}
        ix = chain.ix("set_join_authorization", accounts, args)
        assert chain.send_fails([ix], [signer], address).name == "Unauthorized"
    accounts = {"join_authority": join_authority.pubkey(), "run": run}
    # not the PDA of (run, grantee)
    wrong = chain.join_authorization_address(run, Keypair().pubkey())
    ix = chain.ix("set_join_authorization", accounts | {"authorization": wrong}, args)
    assert chain.send_fails([ix], [join_authority], wrong).name == "WrongPda"
    # an existing authorization of another grantee cannot be rewritten for this one
    other = authorize(chain, join_authority, run, Keypair().pubkey())
    ix = chain.ix("set_join_authorization", accounts | {"authorization": other}, args)
    assert chain.send_fails([ix], [join_authority], other).name == "WrongPda"


def test_open_run_ignores_the_authorization_account(chain):
    _, run = open_run(chain, make_config(2))
    wallet = chain.wallet()
    chain.join(wallet, run, authorization=Keypair().pubkey())
    assert pending_signers(chain.state(run)) == [wallet.pubkey()]


# --------------------------------------------------------------------------------------------------
# capacity


def test_join_when_the_next_epoch_is_full(chain):
    """An epoch holds at most global_batch_size_start members (each must get data every round)."""
    config = make_config(2, global_batch_size_start=2, global_batch_size_end=4)
    _, run = open_run(chain, config)
    a, b, c, d = (chain.wallet() for _ in range(4))
    chain.join(a, run)
    chain.join(b, run)
    assert chain.join_fails(c, run) == "RunFull"
    # a pending wallet may join again (a new p2p identity); it takes no new place
    fresh = Keypair()
    chain.join(a, run, node_key=fresh)
    assert chain.state(run)["registry"][0]["p2p_identity"] == fresh.pubkey()
    # the epoch starts with a and b; joins for the next epoch have their own two places
    chain.advance(config["waiting_for_members_extra_time"])
    chain.call("tick", a, run)
    chain.call("warmup_witness", a, run, {"index": 0})
    assert chain.join_fails(c, run) == "JoinDuringWarmup"
    start_pending_round(chain, run, a)
    assert chain.state(run)["run_state"] == "RoundTrain"
    chain.join(c, run)
    chain.join(a, run)
    assert chain.join_fails(d, run) == "RunFull"
    chain.call("exit_run", c, run)
    chain.join(d, run)
    assert pending_signers(chain.state(run)) == [a.pubkey(), d.pubkey()]


def test_lamports_sent_to_an_authorization_address_do_not_block_the_grant(chain, gated):
    """Anyone can send lamports to any address; that must not stop the PDA from being created."""
    join_authority, run = gated
    grantee, mallory = chain.wallet(), chain.wallet()
    address = chain.join_authorization_address(run, grantee.pubkey())
    gift = transfer(TransferParams(from_pubkey=mallory.pubkey(), to_pubkey=address, lamports=10**6))
    chain.send([gift], [mallory])
    authorize(chain, join_authority, run, grantee.pubkey())
    auth = chain.idl.decode_account("JoinAuthorization", chain.account_bytes(address))
    assert auth["allowed"] and auth["grantee"] == grantee.pubkey()
    chain.join(grantee, run, authorization=address)


def test_a_join_during_warmup_is_refused_not_lost(chain):
    """The earlier program accepted it (ClientJoined, fee paid), and the epoch's first round then voided
    it: the wallet was in no epoch. Now it is refused by name and the wallet joins once training runs."""
    config = make_config(2)
    _, run = open_run(chain, config)
    members = [chain.wallet() for _ in range(2)]
    begin_warmup(chain, run, members, config)
    late = chain.wallet()
    assert chain.join_fails(late, run) == "JoinDuringWarmup"
    chain.call("warmup_witness", members[0], run, {"index": 0})
    start_pending_round(chain, run, members[0])
    chain.join(late, run)
    assert pending_signers(chain.state(run)) == [late.pubkey()]


def test_closing_a_join_authorization_refunds_it_and_withdraws_the_join(chain, gated):
    join_authority, run = gated
    grantee = chain.wallet()
    address = authorize(chain, join_authority, run, grantee.pubkey())
    chain.join(grantee, run, authorization=address)
    rent = chain.svm.get_account(address).lamports
    balance = chain.svm.get_balance(join_authority.pubkey())
    accounts = {"join_authority": join_authority.pubkey(), "run": run, "authorization": address}
    for stranger in (chain.wallet(), chain.run_authority):
        impostor = accounts | {"join_authority": stranger.pubkey()}
        ix = chain.ix("close_join_authorization", impostor)
        assert chain.send_fails([ix], [stranger], address).name == "Unauthorized"
    chain.send([chain.ix("close_join_authorization", accounts)], [join_authority])
    assert chain.account_bytes(address) is None
    assert (
        chain.svm.get_balance(join_authority.pubkey()) == balance + rent
    )  # the harness payer pays fees
    assert pending_signers(chain.state(run)) == []
    assert chain.join_fails(grantee, run, authorization=address) == "JoinNotAuthorized"
    ix = chain.ix("close_join_authorization", accounts)
    assert chain.send_fails([ix], [join_authority], run).name == "WrongAccountOwner"
