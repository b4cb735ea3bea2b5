"""Stakes that cheating loses: a run names the treasury's joiner PDA as its join authority (Authorized join
policy), so only wallets that staked can join; a conviction by the coordinator (here: equivocation) lets
anyone slash the stake into the reward pool (for an equivocation and for a verification conviction alike); an honest member that left withdraws its stake after the
unstake delay. Tokens and lamports are conserved."""

from __future__ import annotations

from solders.keypair import Keypair
from support.coordinator_chain import (
    by_index,
    convict_by_dispute,
    equivocation,
    make_config,
    play_epoch,
    play_round,
    start_epoch,
)

CLIENTS = 4
CONFIG = make_config(CLIENTS, epoch_time=40, join_policy="Authorized")
CHECKED = {**CONFIG, "verification_percent": 100}  # every result checked: disputes possible
STAKE = 500
RATE = 10
# an epoch, its cooldown and a round (train + witness time)
FLOOR = (
    CONFIG["epoch_time"]
    + CONFIG["cooldown_time"]
    + CONFIG["max_round_train_time"]
    + CONFIG["round_witness_time"]
)


def staked_run(tc, config=CONFIG):
    """A run whose join authority is its treasury's joiner; the treasury requires STAKE to join."""
    chain, t = tc.chain, tc.treasurer
    authority, run_key = chain.wallet(), Keypair()
    run = chain.create_run_at(run_key, authority, t.joiner_address(run_key.pubkey()))
    chain.open_run(authority, run, config)
    mint, mint_authority = tc.create_mint()
    tc.send([t.init_treasury(chain.payer.pubkey(), authority.pubkey(), run, mint, tc.token_program, RATE, 0)],
            [authority])  # fmt: skip
    too_short = t.init_stakes(
        chain.payer.pubkey(), authority.pubkey(), run, tc.treasury(run), STAKE, FLOOR - 1
    )
    assert tc.fails([too_short], [authority]) == "DelayTooShort"
    tc.send([t.init_stakes(chain.payer.pubkey(), authority.pubkey(), run, tc.treasury(run), STAKE, FLOOR)],
            [authority], measure="init_stakes")  # fmt: skip
    return authority, run, mint, mint_authority


def fund_wallet(tc, mint, mint_authority, amount=STAKE):
    wallet = tc.chain.wallet()
    account = tc.token_account(mint, wallet.pubkey())
    tc.mint_to(mint, mint_authority, account, amount)
    return wallet, account


def equivocate(chain, run, key: Keypair, index: int, reporter: Keypair) -> None:
    """Two signed results of one step with different commitments: the coordinator convicts the member."""
    chain.send(equivocation(chain, run, key, index, reporter), [reporter])
    assert chain.state(run)["clients"][index]["state"] == "Convicted"


def test_only_staked_wallets_join_and_a_conviction_slashes_the_stake(tc, core):
    chain, t = tc.chain, tc.treasurer
    _, run, mint, mint_authority = staked_run(tc)
    treasury = tc.treasury(run)
    stakers = [fund_wallet(tc, mint, mint_authority) for _ in range(CLIENTS)]
    for wallet, source in stakers:
        tc.send([t.stake(run, treasury, wallet.pubkey(), source)], [wallet], measure="stake")
        assert tc.balance(source) == 0
    assert tc.balance(treasury["stake_vault"]) == STAKE * CLIENTS
    stranger = chain.wallet()
    assert chain.join_fails(stranger, run) == "JoinNotAuthorized"
    members = [w for w, _ in stakers]

    play_epoch(chain, core, run, members, CONFIG)
    keys = [Keypair() for _ in range(CLIENTS)]
    start_epoch(chain, run, members, CONFIG, keys)
    play_round(chain, core, run, members)
    clients = chain.state(run)["clients"][:CLIENTS]
    index = 2
    cheat = next(w for w in members if w.pubkey() == clients[index]["signer"])
    cheat_key = keys[[k.pubkey() for k in keys].index(clients[index]["p2p_identity"])]
    reporter = chain.wallet()
    honest_index = 0
    honest = next(w for w in members if w.pubkey() == clients[honest_index]["signer"])
    # nothing to slash before a conviction, and an index must name the stake's own wallet
    assert tc.fails([t.slash(run, treasury, reporter.pubkey(), honest.pubkey(), honest_index)], [reporter]) \
        == "NotConvicted"  # fmt: skip
    equivocate(chain, run, cheat_key, index, reporter)
    assert tc.fails([t.slash(run, treasury, reporter.pubkey(), honest.pubkey(), index)], [reporter]) \
        == "NotConvicted"  # fmt: skip

    pool_before, lamports_before = (
        tc.balance(treasury["vault"]),
        chain.svm.get_balance(reporter.pubkey()),
    )
    grant = t.join_authorization_address(run, cheat.pubkey())
    grant_rent = chain.svm.get_balance(grant)
    result = tc.send(
        [t.slash(run, treasury, reporter.pubkey(), cheat.pubkey(), index)],
        [reporter],
        measure="slash",
    )
    assert tc.balance(treasury["vault"]) == pool_before + STAKE  # the stake joins the reward pool
    assert tc.balance(treasury["stake_vault"]) == STAKE * (CLIENTS - 1)
    assert tc.treasury(run)["slashed"] == STAKE
    assert (
        chain.account_bytes(grant) is None
    )  # its authorization to join is gone, its rent to the reporter
    assert (
        chain.svm.get_balance(reporter.pubkey()) == lamports_before + grant_rent
    )  # the chain's payer pays fees
    events = dict(tc.idl.events_in_logs(list(result.logs()), tc.program_id))
    assert events["Slashed"]["wallet"] == cheat.pubkey() and events["Slashed"]["amount"] == STAKE
    assert tc.fails([t.slash(run, treasury, reporter.pubkey(), cheat.pubkey(), index)], [reporter]) \
        == "WrongStakeState"  # fmt: skip
    assert chain.join_fails(cheat, run) == "JoinNotAuthorized"  # no stake, no next epoch
    # the slashed wallet closes its empty Stake account (rent back)
    stake_account = t.stake_address(run, cheat.pubkey())
    rent, before = chain.svm.get_balance(stake_account), chain.svm.get_balance(cheat.pubkey())
    tc.send([t.withdraw_stake(run, treasury, cheat.pubkey(), stakers[0][1])], [cheat])
    assert (
        chain.svm.get_balance(cheat.pubkey()) == before + rent
        and chain.account_bytes(stake_account) is None
    )


def test_an_honest_member_withdraws_after_leaving_and_the_delay(tc, core):
    chain, t = tc.chain, tc.treasurer
    _, run, mint, mint_authority = staked_run(tc)
    treasury = tc.treasury(run)
    stakers = [fund_wallet(tc, mint, mint_authority) for _ in range(CLIENTS)]
    for wallet, source in stakers:
        tc.send([t.stake(run, treasury, wallet.pubkey(), source)], [wallet])
    members = [w for w, _ in stakers]
    play_epoch(chain, core, run, members, CONFIG)
    wallet, source = stakers[0]
    # a second stake of the same wallet, or a stake given up while still registered, is refused
    assert (
        tc.fails([t.stake(run, treasury, wallet.pubkey(), source)], [wallet])
        == "AlreadyInitialized"
    )
    assert tc.fails([t.unstake(run, wallet.pubkey())], [wallet]) == "StillInRun"
    assert (
        tc.fails([t.withdraw_stake(run, treasury, wallet.pubkey(), source)], [wallet])
        == "WrongStakeState"
    )
    chain.call("exit_run", wallet, run)
    grant = t.join_authorization_address(run, wallet.pubkey())
    grant_rent, before = chain.svm.get_balance(grant), chain.svm.get_balance(wallet.pubkey())
    tc.send([t.unstake(run, wallet.pubkey())], [wallet], measure="unstake")
    assert chain.account_bytes(grant) is None
    assert (
        chain.svm.get_balance(wallet.pubkey()) == before + grant_rent
    )  # the chain's payer pays the fees
    assert chain.join_fails(wallet, run) == "JoinNotAuthorized"
    assert (
        tc.fails([t.withdraw_stake(run, treasury, wallet.pubkey(), source)], [wallet])
        == "StakeLocked"
    )
    assert tc.fails([t.unstake(run, wallet.pubkey())], [wallet]) == "WrongStakeState"
    chain.advance(FLOOR)
    stake_account = t.stake_address(run, wallet.pubkey())
    rent, before = chain.svm.get_balance(stake_account), chain.svm.get_balance(wallet.pubkey())
    tc.send(
        [t.withdraw_stake(run, treasury, wallet.pubkey(), source)],
        [wallet],
        measure="withdraw_stake",
    )
    assert tc.balance(source) == STAKE and chain.account_bytes(stake_account) is None
    assert chain.svm.get_balance(wallet.pubkey()) == before + rent
    assert tc.balance(treasury["stake_vault"]) == STAKE * (CLIENTS - 1)  # tokens conserved
    # it may stake again, and join again
    tc.send([t.stake(run, treasury, wallet.pubkey(), source)], [wallet])
    chain.join(wallet, run)


def test_stakes_need_the_treasury_as_join_authority(tc, core):
    chain, t = tc.chain, tc.treasurer
    authority = chain.wallet()
    run = chain.create_run_at(
        Keypair(), authority, authority.pubkey()
    )  # the authority grants joins itself
    chain.open_run(authority, run, CONFIG)
    mint, _ = tc.create_mint()
    tc.send([t.init_treasury(chain.payer.pubkey(), authority.pubkey(), run, mint, tc.token_program, RATE, 0)],
            [authority])  # fmt: skip
    init = t.init_stakes(
        chain.payer.pubkey(), authority.pubkey(), run, tc.treasury(run), STAKE, FLOOR
    )
    assert tc.fails([init], [authority]) == "NotJoinAuthority"
    wallet, source = fund_wallet(tc, mint, _)
    assert (
        tc.fails([t.stake(run, tc.treasury(run), wallet.pubkey(), source)], [wallet]) == "StakesOff"
    )


def test_a_convicted_member_that_left_and_unstaked_is_still_slashed(tc, core):
    """Leaving right after cheating does not save the stake: the unstake delay outlasts the epoch in which
    it can be convicted, and an Unstaking stake is slashed like a Staked one."""
    chain, t = tc.chain, tc.treasurer
    _, run, mint, mint_authority = staked_run(tc)
    treasury = tc.treasury(run)
    stakers = [fund_wallet(tc, mint, mint_authority) for _ in range(CLIENTS)]
    for wallet, source in stakers:
        tc.send([t.stake(run, treasury, wallet.pubkey(), source)], [wallet])
    members = [w for w, _ in stakers]
    keys = [Keypair() for _ in range(CLIENTS)]
    start_epoch(chain, run, members, CONFIG, keys)
    play_round(chain, core, run, members)
    clients = chain.state(run)["clients"][:CLIENTS]
    index = 1
    cheat = next(w for w in members if w.pubkey() == clients[index]["signer"])
    cheat_key = keys[[k.pubkey() for k in keys].index(clients[index]["p2p_identity"])]
    chain.call("exit_run", cheat, run)
    tc.send([t.unstake(run, cheat.pubkey())], [cheat])
    assert (
        tc.fails([t.withdraw_stake(run, treasury, cheat.pubkey(), stakers[0][1])], [cheat])
        == "StakeLocked"
    )
    equivocate(chain, run, cheat_key, index, chain.wallet())
    reporter = chain.wallet()
    tc.send([t.slash(run, treasury, reporter.pubkey(), cheat.pubkey(), index)], [reporter])
    assert tc.balance(treasury["vault"]) == STAKE and tc.balance(
        treasury["stake_vault"]
    ) == STAKE * (CLIENTS - 1)
    chain.advance(FLOOR)
    before = tc.balance(stakers[0][1])
    tc.send(
        [t.withdraw_stake(run, treasury, cheat.pubkey(), stakers[0][1])], [cheat]
    )  # closes, pays nothing
    assert tc.balance(stakers[0][1]) == before


def test_a_conviction_is_slashed_from_its_record_after_the_member_list_is_rebuilt(tc, core):
    """The Run's epoch list forgets a conviction when the next epoch starts; the wallet's registry entry keeps
    it (banned_until) for the ban, and slash reads it there by registry index. A banned wallet cannot exit
    the registry, so it cannot unstake out of reach first."""
    chain, t = tc.chain, tc.treasurer
    _, run, mint, mint_authority = staked_run(tc)
    treasury = tc.treasury(run)
    stakers = [fund_wallet(tc, mint, mint_authority) for _ in range(CLIENTS + 1)]
    for wallet, source in stakers:
        tc.send([t.stake(run, treasury, wallet.pubkey(), source)], [wallet])
    members = [w for w, _ in stakers[:CLIENTS]]
    keys = [Keypair() for _ in range(CLIENTS)]
    start_epoch(chain, run, members, CONFIG, keys)
    play_round(chain, core, run, members)
    clients = chain.state(run)["clients"][:CLIENTS]
    by_wallet = {m.pubkey(): m for m in members}
    members = [by_wallet[c["signer"]] for c in clients]
    index = 3
    cheat_key = keys[[k.pubkey() for k in keys].index(clients[index]["p2p_identity"])]
    cheat = members[index]
    equivocate(chain, run, cheat_key, index, chain.wallet())
    assert chain.fails("exit_run", cheat, run) == "Banned"
    for _ in range(100):
        if chain.state(run)["run_state"] != "RoundTrain":
            break
        play_round(chain, core, run, members, all_elected=False)
    chain.advance(CONFIG["cooldown_time"])
    chain.call("tick", members[0], run)
    # the next epoch starts without it: its list no longer names the cheater
    for wallet in [*members[:index], stakers[CLIENTS][0]]:
        chain.join(wallet, run)
    chain.advance(CONFIG["waiting_for_members_extra_time"])
    chain.call("tick", members[0], run)
    state = chain.state(run)
    assert state["run_state"] == "Warmup"
    assert all(
        c["signer"] != cheat.pubkey() for c in state["clients"][: state["epoch"]["clients_len"]]
    )
    registry = [e["signer"] for e in state["registry"][: state["registry_len"]]]
    at, reporter = registry.index(cheat.pubkey()), chain.wallet()
    honest_at = registry.index(members[0].pubkey())
    assert tc.fails([t.slash(run, treasury, reporter.pubkey(), members[0].pubkey(), honest_at)], [reporter]) \
        == "NotConvicted"  # fmt: skip
    tc.send(
        [t.slash(run, treasury, reporter.pubkey(), cheat.pubkey(), at)], [reporter], measure="slash"
    )
    assert tc.treasury(run)["slashed"] == STAKE and tc.balance(treasury["vault"]) == STAKE


def test_a_verification_conviction_slashes_the_stake_and_forfeits_the_epochs_points(tc, core):
    """The same slash after the other kind of conviction: a check fails, a dispute opens, and a majority of
    its committee convicts the trainer (FailedVerification). Points it settled stay claimable; the ones not
    settled yet are forfeited, and a claim for them is refused."""
    chain, t = tc.chain, tc.treasurer
    authority, run, mint, mint_authority = staked_run(tc, CHECKED)
    treasury = tc.treasury(run)
    stakers = [fund_wallet(tc, mint, mint_authority) for _ in range(CLIENTS)]
    for wallet, source in stakers:
        tc.send([t.stake(run, treasury, wallet.pubkey(), source)], [wallet])
    wallets = [w for w, _ in stakers]
    play_epoch(chain, core, run, wallets, CHECKED)
    # the first epoch's points, settled: out of reach of a later conviction
    for wallet in wallets:
        chain.settle_points(authority, run, wallet.pubkey())
    play_epoch(chain, core, run, wallets, CHECKED)  # the second's are not settled
    start_epoch(chain, run, wallets, CHECKED)
    members = by_index(chain, run, wallets)
    for _ in range(4):  # the seed that draws the epoch's first step's checks is out
        play_round(chain, core, run, members)
    step, index, reporter = chain.state(run)["epoch"]["start_step"], 1, chain.wallet()
    cheat = members[index]
    slash = t.slash(run, treasury, reporter.pubkey(), cheat.pubkey(), index)
    assert tc.fails([slash], [reporter]) == "NotConvicted"
    events = convict_by_dispute(chain, core, run, members, step, index)
    name, convicted = events[-1]
    assert name == "ClientConvicted" and convicted["reason"] == "FailedVerification"
    tc.send([slash], [reporter], measure="slash")
    assert tc.balance(treasury["vault"]) == STAKE
    assert tc.balance(treasury["stake_vault"]) == STAKE * (CLIENTS - 1)
    assert tc.treasury(run)["slashed"] == STAKE
    assert chain.join_fails(cheat, run) == "JoinNotAuthorized"

    # what it may claim: its first epoch's points, settled; not the second's, forfeited
    assert chain.fails("settle_points", authority, run, {"wallet": cheat.pubkey()},
                       points=chain.points_address(run, cheat.pubkey())) == "NoChange"  # fmt: skip
    settled = chain.points(run, cheat.pubkey())
    assert settled > 0 and convicted["forfeited"] > 0
    funder, source = fund_wallet(tc, mint, mint_authority, 10**6)
    tc.send([t.fund(run, tc.treasury(run), funder.pubkey(), source, 10**6)], [funder])
    claim_key = chain.wallet(1)
    tc.send([t.register_claim_key(run, cheat.pubkey(), claim_key.pubkey())], [cheat])
    destination = tc.token_account(mint, claim_key.pubkey())

    def claim(amount: int):
        return t.claim(
            run, tc.treasury(run), cheat.pubkey(), claim_key.pubkey(), destination, amount
        )

    with_forfeited = (settled + convicted["forfeited"]) * RATE
    assert tc.fails([claim(with_forfeited)], [claim_key]) == "BeyondEntitlement"
    tc.send([claim(settled * RATE)], [claim_key])
    assert tc.balance(destination) == settled * RATE


def test_the_treasury_closes_only_once_every_stake_is_withdrawn(tc, core):
    """withdraw_stake needs the Treasury: closing it while a stake is held would strand that stake, so
    close_treasury waits for the last withdrawal, then closes both vaults (tokens sent to the stake vault
    beyond the stakes go with the unclaimed rest)."""
    chain, t = tc.chain, tc.treasurer
    authority, run, mint, mint_authority = staked_run(tc)
    treasury = tc.treasury(run)
    wallet, source = fund_wallet(tc, mint, mint_authority)
    tc.send([t.stake(run, treasury, wallet.pubkey(), source)], [wallet])
    tc.mint_to(mint, mint_authority, treasury["stake_vault"], 7)  # a gift nobody staked
    chain.call("set_paused", authority, run, {"paused": True})
    chain.call("close_run", authority, run, run_index=chain.run_index_address(b"test-run"),
               recipient=authority.pubkey())  # fmt: skip
    tc.send([t.mark_run_closed(run)], [])
    destination = tc.token_account(mint, authority.pubkey())
    close = t.close_treasury(run, tc.treasury(run), destination)
    assert tc.fails([close], [authority]) == "StakesRemain"
    tc.send([t.unstake(run, wallet.pubkey())], [wallet])
    chain.advance(FLOOR)
    tc.send([t.withdraw_stake(run, treasury, wallet.pubkey(), source)], [wallet])
    assert tc.balance(source) == STAKE and tc.treasury(run)["staked"] == 0
    tc.send([close], [authority], measure="close_treasury (stakes)")
    assert tc.balance(destination) == 7
    assert chain.account_bytes(treasury["stake_vault"]) is None
    assert chain.account_bytes(t.treasury_address(run)) is None
