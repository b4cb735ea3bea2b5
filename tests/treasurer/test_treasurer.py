"""The treasurer on LiteSVM with the real coordinator, SPL Token and Token-2022: a run's vault is funded,
members earn points in a real epoch, the coordinator settles them, and each member's claim key claims
exactly points × reward_per_point — never twice, never beyond, never with another wallet's points or a
forged coordinator account — also after the run closed, until the claim window ends. Tokens and lamports
are conserved."""

from __future__ import annotations

from solders.account import Account
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from support.coordinator_chain import make_config, open_run, play_epoch

from cohort.sdk.treasurer import TOKEN_2022_PROGRAM_ID, TOKEN_PROGRAM_ID

CONFIG = make_config(4, epoch_time=60)
RATE = 1_000  # base units per point
WINDOW = 3_600  # seconds claims stay open after the run closes
CU_LIMIT = 50_000


def setup(tc, core, fund: int = 10**9):
    """A run whose 4 members played one epoch and had their points settled; its treasury, funded."""
    chain = tc.chain
    authority, run = open_run(chain, CONFIG)
    members = [chain.wallet() for _ in range(4)]
    play_epoch(chain, core, run, members, CONFIG)
    for member in members:
        chain.settle_points(authority, run, member.pubkey())
    mint, mint_authority = tc.create_mint()
    t = tc.treasurer
    tc.send([t.init_treasury(chain.payer.pubkey(), authority.pubkey(), run, mint, tc.token_program, RATE, WINDOW)],
            [authority], measure="init_treasury")  # fmt: skip
    funder = chain.wallet()
    source = tc.token_account(mint, funder.pubkey())
    tc.mint_to(mint, mint_authority, source, fund)
    tc.send(
        [t.fund(run, tc.treasury(run), funder.pubkey(), source, fund)], [funder], measure="fund"
    )
    return authority, run, members, mint


def register(tc, run, member) -> Keypair:
    claim_key = tc.chain.wallet(1)
    tc.send([tc.treasurer.register_claim_key(run, member.pubkey(), claim_key.pubkey())], [member],
            measure="register_claim_key")  # fmt: skip
    return claim_key


def claim_ix(tc, run, member, claim_key, destination, amount):
    return tc.treasurer.claim(
        run, tc.treasury(run), member.pubkey(), claim_key.pubkey(), destination, amount
    )


def test_members_claim_exactly_their_settled_points(tc, core):
    chain, t = tc.chain, tc.treasurer
    authority, run, members, mint = setup(tc, core)
    treasury = tc.treasury(run)
    assert treasury["coordinator"] == chain.program_id and treasury["funded"] == 10**9
    assert tc.balance(treasury["vault"]) == 10**9
    paid, keys = 0, []
    for member in members:
        points = chain.points(run, member.pubkey())
        assert points > 0
        claim_key = register(tc, run, member)
        keys.append(claim_key)
        destination = tc.token_account(mint, Keypair().pubkey())  # any token account, anyone's
        owed = t.entitlement(tc.treasury(run), tc.member(run, member.pubkey()), points).claimable
        assert owed == points * RATE
        tc.send(
            [claim_ix(tc, run, member, claim_key, destination, owed)], [claim_key], measure="claim"
        )
        assert (
            tc.balance(destination) == owed and tc.member(run, member.pubkey())["claimed"] == owed
        )
        paid += owed
        # a second claim of the same points
        assert (
            tc.fails([claim_ix(tc, run, member, claim_key, destination, 1)], [claim_key])
            == "NothingToClaim"
        )
    assert tc.treasury(run)["claimed"] == paid
    assert tc.balance(treasury["vault"]) == 10**9 - paid  # tokens conserved

    # the next epoch's points are paid on top, and a raised rate pays every settled point more
    play_epoch(chain, core, run, members, CONFIG)
    member = members[0]
    chain.settle_points(authority, run, member.pubkey())
    assert tc.fails([t.set_rate(run, authority.pubkey(), RATE - 1)], [authority]) == "RateLowered"
    assert tc.fails([t.set_rate(run, member.pubkey(), RATE * 2)], [member]) == "Unauthorized"
    tc.send([t.set_rate(run, authority.pubkey(), RATE * 2)], [authority], measure="set_rate")
    points = chain.points(run, member.pubkey())
    claimed = tc.member(run, member.pubkey())["claimed"]
    owed = points * RATE * 2 - claimed
    destination = tc.token_account(mint, keys[0].pubkey())
    vault_before = tc.balance(treasury["vault"])
    tc.send([claim_ix(tc, run, member, keys[0], destination, owed)], [keys[0]], measure="claim")
    assert (
        tc.balance(destination) == owed
        and tc.member(run, member.pubkey())["claimed"] == points * RATE * 2
    )
    assert tc.balance(treasury["vault"]) == vault_before - owed
    # the claim key is set once: the (hot) wallet cannot replace it
    assert (
        tc.fails([t.register_claim_key(run, member.pubkey(), Keypair().pubkey())], [member])
        == "AlreadyInitialized"
    )


def test_claims_beyond_entitlement_or_with_others_points_or_keys_are_refused(tc, core):
    chain, t = tc.chain, tc.treasurer
    _, run, members, mint = setup(tc, core, fund=10**9)
    a, b = members[0], members[1]
    key_a, key_b = register(tc, run, a), register(tc, run, b)
    destination = tc.token_account(mint, key_a.pubkey())
    owed = chain.points(run, a.pubkey()) * RATE
    watch = [t.treasury_address(run), t.member_address(run, a.pubkey()), destination]
    assert (
        tc.fails([claim_ix(tc, run, a, key_a, destination, owed + 1)], [key_a], watch)
        == "BeyondEntitlement"
    )
    assert tc.fails([claim_ix(tc, run, a, key_a, destination, 0)], [key_a], watch) == "ZeroAmount"
    # the hot wallet itself is not the claim key
    assert tc.fails([claim_ix(tc, run, a, a, destination, owed)], [a], watch) == "WrongClaimKey"
    # b's claim key on a's member account
    assert (
        tc.fails([claim_ix(tc, run, a, key_b, destination, owed)], [key_b], watch)
        == "WrongClaimKey"
    )
    # a's member account with b's Points account (another wallet's points)
    forged = _with_points(
        claim_ix(tc, run, a, key_a, destination, owed), t.points_address(run, b.pubkey())
    )
    assert tc.fails([forged], [key_a], watch) == "WrongPoints"
    # the vault as the destination would count as paid without moving anything
    into_vault = claim_ix(tc, run, a, key_a, tc.treasury(run)["vault"], owed)
    assert tc.fails([into_vault], [key_a], watch) == "WrongVault"
    # a partial claim, then the rest
    tc.send([claim_ix(tc, run, a, key_a, destination, owed // 2)], [key_a], measure="claim")
    tc.send([claim_ix(tc, run, a, key_a, destination, owed - owed // 2)], [key_a])
    assert tc.balance(destination) == owed


def test_a_short_vault_refuses_the_claim_until_funded(tc, core):
    chain, t = tc.chain, tc.treasurer
    _, run, members, mint = setup(tc, core, fund=10)
    member = members[0]
    key = register(tc, run, member)
    destination = tc.token_account(mint, key.pubkey())
    owed = chain.points(run, member.pubkey()) * RATE
    watch = [t.treasury_address(run), t.member_address(run, member.pubkey()), destination]
    assert (
        tc.fails([claim_ix(tc, run, member, key, destination, owed)], [key], watch) == "VaultShort"
    )
    tc.send([claim_ix(tc, run, member, key, destination, 10)], [key])  # what the vault holds
    funder = chain.wallet()
    source = tc.token_account(mint, funder.pubkey())
    assert (
        tc.fails([t.fund(run, tc.treasury(run), funder.pubkey(), source, 0)], [funder])
        == "ZeroAmount"
    )
    wrong_vault = tc.treasury(run) | {"vault": source}
    assert (
        tc.fails([t.fund(run, wrong_vault, funder.pubkey(), source, 1)], [funder]) == "WrongVault"
    )


def _with_points(ix, points: Pubkey):
    metas = list(ix.accounts)
    metas[3] = metas[3].__class__(points, False, False)
    return ix.__class__(ix.program_id, ix.data, metas)


def test_forged_coordinator_accounts_are_refused(tc, core):
    chain, t = tc.chain, tc.treasurer
    authority, run, members, mint = setup(tc, core)
    member = members[0]
    key = register(tc, run, member)
    destination = tc.token_account(mint, key.pubkey())
    real = t.points_address(run, member.pubkey())
    data = chain.account_bytes(real)
    forger = Keypair().pubkey()  # another program
    watch = [t.treasury_address(run), t.member_address(run, member.pubkey()), destination]
    # the same bytes with more points, owned by another program, at a fresh address
    fat = bytearray(data)
    fat[80:88] = (10**6).to_bytes(8, "little")
    elsewhere = Keypair().pubkey()
    chain.put_account(elsewhere, bytes(fat), owner=forger)
    ix = claim_ix(tc, run, member, key, destination, 10**6 * RATE)
    assert tc.fails([_with_points(ix, elsewhere)], [key], watch) == "WrongCoordinator"
    # a copied layout owned by the coordinator, but not at the wallet's Points address
    chain.put_account(elsewhere, bytes(fat), owner=chain.program_id)
    assert tc.fails([_with_points(ix, elsewhere)], [key], watch) == "WrongPoints"
    # another type of coordinator account at the right size is not Points
    chain.put_account(elsewhere, bytes(8) + bytes(fat[8:]), owner=chain.program_id)
    assert tc.fails([_with_points(ix, elsewhere)], [key], watch) == "NotPoints"
    # the real address, taken over by another owner
    lamports = chain.svm.get_balance(real)
    chain.svm.set_account(real, Account(lamports, bytes(fat), forger))
    assert tc.fails([ix], [key], watch) == "WrongCoordinator"
    chain.svm.set_account(real, Account(lamports, data, chain.program_id))

    # a Run's bytes copied under another owner: set_rate refuses it, and a treasury made on it is bound to
    # the other owner (the SDK refuses to use it)
    fake_run = Keypair().pubkey()
    chain.put_account(fake_run, chain.run_bytes(run), owner=forger)
    set_rate = t.set_rate(run, authority.pubkey(), RATE * 2)
    metas = list(set_rate.accounts)
    metas[1] = metas[1].__class__(fake_run, False, False)
    forged = set_rate.__class__(set_rate.program_id, set_rate.data, metas)
    assert tc.fails([forged], [authority], [t.treasury_address(run)]) == "WrongRun"
    chain.put_account(
        run, chain.run_bytes(run)[:-8], owner=chain.program_id
    )  # a run of another layout
    assert tc.fails([set_rate], [authority], [t.treasury_address(run)]) == "NotARun"
    tc.send([t.init_treasury(chain.payer.pubkey(), authority.pubkey(), fake_run, mint, tc.token_program, RATE, 0)],
            [authority])  # fmt: skip
    assert tc.treasury(fake_run)["coordinator"] == forger
    try:
        t.check_treasury(tc.treasury(fake_run))
        raise AssertionError("a treasury of another coordinator was accepted")
    except ValueError:
        pass


def test_init_checks_authority_mint_and_rule(tc, core):
    chain, t = tc.chain, tc.treasurer
    authority, run = open_run(chain, CONFIG)
    mint, _ = tc.create_mint()
    payer = chain.payer.pubkey()
    stranger = chain.wallet()
    assert tc.fails([t.init_treasury(payer, stranger.pubkey(), run, mint, tc.token_program, RATE, WINDOW)],
                    [stranger]) == "Unauthorized"  # fmt: skip
    assert tc.fails([t.init_treasury(payer, authority.pubkey(), run, mint, tc.token_program, 0, WINDOW)],
                    [authority]) == "InvalidRate"  # fmt: skip
    other_program = next(
        p for p in (TOKEN_PROGRAM_ID, TOKEN_2022_PROGRAM_ID) if p != tc.token_program
    )
    for wrong_program in (Keypair().pubkey(), other_program):  # not a token program; not the mint's
        assert tc.fails([t.init_treasury(payer, authority.pubkey(), run, mint, wrong_program, RATE, WINDOW)],
                        [authority]) in ("WrongProgram", "WrongMint")  # fmt: skip
    if tc.token_program == TOKEN_2022_PROGRAM_ID:
        risky, _ = tc.create_mint(permanent_delegate=stranger.pubkey())
        assert tc.fails([t.init_treasury(payer, authority.pubkey(), run, risky, tc.token_program, RATE, WINDOW)],
                        [authority]) == "UnsupportedMint"  # fmt: skip
    # someone sent lamports to the treasury's address first: it is taken over, not blocked
    chain.svm.airdrop(t.treasury_address(run), 1_000)
    tc.send(
        [t.init_treasury(payer, authority.pubkey(), run, mint, tc.token_program, RATE, WINDOW)],
        [authority],
    )
    assert tc.fails([t.init_treasury(payer, authority.pubkey(), run, mint, tc.token_program, RATE, WINDOW)],
                    [authority]) == "AlreadyInitialized"  # fmt: skip


def test_claims_stay_open_after_close_until_the_window_then_rent_comes_back(tc, core):
    chain, t = tc.chain, tc.treasurer
    authority, run, members, mint = setup(tc, core)
    keys = [register(tc, run, m) for m in members]
    destination = tc.token_account(mint, authority.pubkey())
    assert tc.fails([t.mark_run_closed(run)]) == "RunStillOpen"
    # the member may not close its Member account while it could still claim (it would reset `claimed`)
    assert tc.fails([t.close_member(run, members[0].pubkey())], [members[0]]) == "PointsRemain"

    chain.call("set_paused", authority, run, {"paused": True})
    chain.call("close_run", authority, run, run_index=chain.run_index_address(b"test-run"),
               recipient=authority.pubkey())  # fmt: skip
    assert chain.account_bytes(run) is None
    tc.send([t.mark_run_closed(run)], measure="mark_run_closed")
    assert tc.treasury(run)["closed_at"] == chain.now
    assert tc.fails([t.mark_run_closed(run)]) == "NoChange"
    # a claim after the close: the Points accounts outlive the run
    owed = chain.points(run, members[0].pubkey()) * RATE
    mine = tc.token_account(mint, keys[0].pubkey())
    tc.send([claim_ix(tc, run, members[0], keys[0], mine, owed)], [keys[0]])
    assert tc.balance(mine) == owed
    # the wallet closes its Points account, then its Member account: rent back
    chain.call(
        "close_points", members[0], run, points=chain.points_address(run, members[0].pubkey())
    )
    before = chain.svm.get_balance(members[0].pubkey())
    member_address = t.member_address(run, members[0].pubkey())
    rent = chain.svm.get_balance(member_address)
    tc.send([t.close_member(run, members[0].pubkey())], [members[0]], measure="close_member")
    assert chain.account_bytes(member_address) is None
    assert chain.svm.get_balance(members[0].pubkey()) == before + rent

    treasury = tc.treasury(run)
    close = t.close_treasury(run, treasury, destination)
    assert tc.fails([close], [authority]) == "ClaimWindowOpen"
    stranger = chain.wallet()
    close_by_stranger = t.close_treasury(
        run, treasury | {"authority": stranger.pubkey()}, destination
    )
    assert tc.fails([close_by_stranger], [stranger]) == "Unauthorized"
    chain.advance(WINDOW)
    rest = tc.balance(treasury["vault"])
    assert rest == 10**9 - owed
    assert treasury["payer"] == chain.payer.pubkey()
    wrong = t.close_treasury(run, treasury | {"payer": authority.pubkey()}, destination)
    assert tc.fails([wrong], [authority]) == "WrongRentRecipient"
    into_vault = t.close_treasury(run, treasury, treasury["vault"])
    assert tc.fails([into_vault], [authority]) == "WrongVault"
    rent = chain.svm.get_balance(t.treasury_address(run)) + chain.svm.get_balance(treasury["vault"])
    before = chain.svm.get_balance(chain.payer.pubkey())
    result = tc.send([close], [authority], measure="close_treasury")
    assert tc.balance(destination) == rest  # tokens conserved: claims + the rest = funded
    assert (
        chain.account_bytes(t.treasury_address(run)) is None
        and chain.account_bytes(treasury["vault"]) is None
    )
    # lamports: both rents go back to whoever paid them (here also the fee payer)
    assert chain.svm.get_balance(chain.payer.pubkey()) == before + rent - result.fee()
    # nothing is claimable any more; members close their Member accounts once the treasury is gone
    gone = t.claim(run, treasury, members[1].pubkey(), keys[1].pubkey(), mine, 1)
    assert tc.fails([gone], [keys[1]]) == "WrongAccountOwner"
    tc.send([t.close_member(run, members[1].pubkey())], [members[1]])


def test_compute_units_stay_within_budget(tc, core, compute_units):
    """Every treasurer instruction measured in this file stays far under 50k CU (the table is printed at
    the end of the session)."""
    setup(tc, core)
    for name, cu in tc.cu.items():
        assert cu <= CU_LIMIT, f"{name}: {cu} CU"
