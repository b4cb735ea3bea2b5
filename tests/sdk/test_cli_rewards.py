"""`cohort rewards` end to end on the localnet: the authority creates a run's treasury with a fresh mint and
funds it, members earn points in a scripted epoch, `status` shows each member's entitlement, a member claims
it, `status` (and `cohort run status`) shows it claimed; bad input and refusals are one clear line."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from solders.keypair import Keypair
from solders.pubkey import Pubkey
from support.scripted_run import funded_run, play_epoch

from cohort.sdk import spl_token
from cohort.sdk.rpc import Rpc
from cohort.sdk.run_config import load_run_file
from cohort.sdk.wallet import load_keypair, save_keypair

RATE = 7
SUPPLY = 1_000_000


def test_rewards_fund_earn_claim_over_the_cli(workspace, helpers, core, tmp_path: Path):
    ws = workspace
    deployed = ws.cli(
        "deploy", "--program", "treasurer", "--program-keypair", str(tmp_path / "t.json")
    )
    assert deployed.exit_code == 0, deployed.output
    ws.restore_default_program()
    run_file = load_run_file(helpers.config_copy(tmp_path, "rewards-run"), core)
    holder: dict[str, list[Keypair]] = {}

    async def earn() -> None:
        async with funded_run(ws, core, run_file) as (_, client, members):
            await play_epoch(client, "rewards-run", members)
            for member in members[:2]:
                await client.settle_points(ws.wallet, "rewards-run", member.pubkey())
            holder["members"] = members

    # a run without a treasury: nothing to show, and `run status` is as before
    no_rewards = ws.cli("rewards", "status", "missing-run")
    assert "missing-run" in helpers.one_error_line(no_rewards)
    asyncio.run(earn())
    members = holder["members"]
    assert (
        ws.cli("rewards", "status", "rewards-run").output.strip()
        == "run rewards-run has no treasury (no rewards)"
    )
    assert "rewards" not in json.loads(ws.cli("run", "status", "rewards-run", "--json").output)
    assert "has no treasury" in helpers.one_error_line(ws.cli("rewards", "fund", "rewards-run", "5", "--from",
                                                              str(ws.wallet.pubkey())))  # fmt: skip

    # bad input, refused before anything is sent
    assert "not a whole number" in helpers.one_error_line(
        ws.cli("rewards", "init", "rewards-run", "--new-mint", "--rate", "seven")
    )
    assert "not a base58 address" in helpers.one_error_line(
        ws.cli("rewards", "init", "rewards-run", "--mint", "nope", "--rate", "7")
    )
    assert "is not an initialized SPL Token or Token-2022 mint" in helpers.one_error_line(
        ws.cli("rewards", "init", "rewards-run", "--mint", str(ws.wallet.pubkey()), "--rate", "7")
    )

    created = ws.cli("rewards", "init", "rewards-run", "--new-mint", "--rate", str(RATE), "--supply",
                     str(SUPPLY), "--json")  # fmt: skip
    assert created.exit_code == 0, created.output
    made = json.loads(created.output)
    assert made["reward_per_point"] == RATE and made["minted"] == SUPPLY
    source = made["minted_to"]
    assert "already has a treasury" in helpers.one_error_line(
        ws.cli("rewards", "init", "rewards-run", "--mint", made["mint"], "--rate", "7")
    )
    assert "must be between 1" in helpers.one_error_line(
        ws.cli("rewards", "fund", "rewards-run", "0", "--from", source)
    )
    assert "less than" in helpers.one_error_line(
        ws.cli("rewards", "fund", "rewards-run", str(SUPPLY + 1), "--from", source)
    )
    stranger = ws.new_wallet("rewards-stranger", sol=1)
    assert "not to the wallet" in helpers.one_error_line(
        ws.cli("rewards", "fund", "rewards-run", "5", "--from", source, "--wallet", str(stranger))
    )
    funded = ws.cli("rewards", "fund", "rewards-run", str(SUPPLY), "--from", source, "--json")
    assert funded.exit_code == 0, funded.output
    assert json.loads(funded.output)["vault_balance"] == SUPPLY

    # the treasurer's own refusals, as plain sentences
    assert "can only be raised" in helpers.one_error_line(
        ws.cli("rewards", "set-rate", "rewards-run", "3")
    )
    wallets = []
    for k, member in enumerate(members):
        path = tmp_path / f"member-{k}.json"
        save_keypair(member, path)
        wallets.append(str(path))
    assert "not the run's authority" in helpers.one_error_line(
        ws.cli("rewards", "set-rate", "rewards-run", "9", "--wallet", wallets[0])
    )

    status = json.loads(ws.cli("rewards", "status", "rewards-run", "--json").output)
    assert status["mint"] == made["mint"] and status["vault_balance"] == SUPPLY
    by_wallet = {m["wallet"]: m for m in status["members"]}
    first = by_wallet[str(members[0].pubkey())]
    assert (
        first["settled_points"] > 0
        and first["claimable"] == first["earned"] == first["settled_points"] * RATE
    )
    assert first["claimed"] == 0 and first["claim_key"] is None
    owed = first["claimable"]

    assert "registered no claim key" in helpers.one_error_line(
        ws.cli("rewards", "claim", "rewards-run", "--wallet", wallets[0])
    )
    registered = ws.cli(
        "rewards", "register-claim-key", "rewards-run", "--wallet", wallets[0], "--json"
    )
    assert json.loads(registered.output)["claim_key"] == str(members[0].pubkey()), registered.output
    assert "can never be replaced" in helpers.one_error_line(
        ws.cli("rewards", "register-claim-key", "rewards-run", "--wallet", wallets[0])
    )
    assert "more than" in helpers.one_error_line(
        ws.cli("rewards", "claim", "rewards-run", "--wallet", wallets[0], "--amount", str(owed + 1))
    )
    assert "is not the claim key" in helpers.one_error_line(
        ws.cli(
            "rewards",
            "claim",
            "rewards-run",
            "--member",
            str(members[0].pubkey()),
            "--wallet",
            wallets[1],
        )
    )
    claimed = ws.cli("rewards", "claim", "rewards-run", "--wallet", wallets[0], "--json")
    assert claimed.exit_code == 0, claimed.output
    paid = json.loads(claimed.output)
    assert paid["amount"] == owed and paid["claimable"] == 0

    async def balance(address: str) -> int:
        async with Rpc(ws.localnet.net.http_url, idl=core.idl) as rpc:
            return await spl_token.balance(rpc, Pubkey.from_string(address))

    assert asyncio.run(balance(paid["to"])) == owed
    assert "nothing to claim" in helpers.one_error_line(
        ws.cli("rewards", "claim", "rewards-run", "--wallet", wallets[0])
    )

    after = json.loads(ws.cli("rewards", "status", "rewards-run", "--json").output)
    row = {m["wallet"]: m for m in after["members"]}[str(members[0].pubkey())]
    assert (
        row["claimed"] == owed
        and row["claimable"] == 0
        and row["claim_key"] == str(members[0].pubkey())
    )
    assert after["vault_balance"] == SUPPLY - owed and after["claimed"] == owed  # tokens conserved
    nowhere = str(Keypair().pubkey())
    assert f"no treasurer program at {nowhere}" in helpers.one_error_line(
        ws.cli("rewards", "status", "rewards-run", "--treasurer-id", nowhere)
    )
    assert "not a base58 address" in helpers.one_error_line(
        ws.cli("rewards", "status", "rewards-run", "--treasurer-id", "nope")
    )

    # stakes: this run requires none, and nobody staked
    assert "requires no stake" in helpers.one_error_line(
        ws.cli("rewards", "stake", "rewards-run", "--from", source)
    )
    assert "has no stake in run rewards-run" in helpers.one_error_line(
        ws.cli("rewards", "unstake", "rewards-run", "--wallet", wallets[0])
    )
    assert "join authority" in helpers.one_error_line(
        ws.cli(
            "rewards", "init-stakes", "rewards-run", "--amount", "100", "--unstake-delay", "100000"
        )
    )

    table = ws.cli("rewards", "status", "rewards-run")
    assert table.exit_code == 0 and "claimable" in table.output, table.output

    # `cohort run status` carries the same rewards, and shows them
    run_status = json.loads(ws.cli("run", "status", "rewards-run", "--json").output)
    assert run_status["rewards"]["vault_balance"] == SUPPLY - owed
    assert {m["wallet"]: m["claimed"] for m in run_status["rewards"]["members"]}[
        str(members[0].pubkey())
    ] == owed
    shown = ws.cli("run", "status", "rewards-run")
    assert shown.exit_code == 0 and "reward vault" in shown.output, shown.output


def test_stakes_over_the_cli(workspace, helpers, core, tmp_path: Path):
    """A run created with `--stakes` (the treasury's joiner is its join authority): the authority requires a
    stake, a wallet stakes, status shows it, and it unstakes and withdraws only after the delay."""
    ws = workspace
    deployed = ws.cli(
        "deploy", "--program", "treasurer", "--program-keypair", str(tmp_path / "t.json")
    )
    assert deployed.exit_code == 0, deployed.output
    ws.restore_default_program()
    open_config = helpers.config_copy(tmp_path, "open-run")
    assert "Authorized" in helpers.one_error_line(
        ws.cli("run", "create", str(open_config), "--stakes")
    )
    config = helpers.config_copy(
        tmp_path, "staked-run", **{'join_policy = "Open"': 'join_policy = "Authorized"'}
    )
    created = ws.cli("run", "create", str(config), "--stakes", "--json")
    assert created.exit_code == 0, created.output
    made = json.loads(
        ws.cli(
            "rewards",
            "init",
            "staked-run",
            "--new-mint",
            "--rate",
            "5",
            "--supply",
            "1000",
            "--json",
        ).output
    )
    c = load_run_file(config, core).config
    floor = c.epoch_time + c.cooldown_time + c.max_round_train_time + c.round_witness_time
    assert "must cover an epoch" in helpers.one_error_line(
        ws.cli(
            "rewards",
            "init-stakes",
            "staked-run",
            "--amount",
            "100",
            "--unstake-delay",
            str(floor - 1),
        )
    )
    stakes = ws.cli(
        "rewards",
        "init-stakes",
        "staked-run",
        "--amount",
        "100",
        "--unstake-delay",
        str(floor),
        "--json",
    )
    assert stakes.exit_code == 0, stakes.output
    assert json.loads(stakes.output)["joiner"] == json.loads(created.output)["join_authority"]

    staker_path = ws.new_wallet("staker", sol=2)
    staker = load_keypair(staker_path)

    async def tokens_for_staker() -> str:
        async with Rpc(ws.localnet.net.http_url, idl=core.idl) as rpc:
            mint = await spl_token.read_mint(rpc, Pubkey.from_string(made["mint"]))
            account = await spl_token.create_token_account(rpc, ws.wallet, mint, staker.pubkey())
            await spl_token.mint_to(rpc, ws.wallet, mint, ws.wallet, account, 100)
            return str(account)

    source = asyncio.run(tokens_for_staker())
    as_staker = ("--wallet", str(staker_path))
    assert "has no stake" in helpers.one_error_line(
        ws.cli("rewards", "unstake", "staked-run", *as_staker)
    )
    staked = ws.cli("rewards", "stake", "staked-run", "--from", source, *as_staker, "--json")
    assert json.loads(staked.output)["staked"] == 100, staked.output
    status = json.loads(ws.cli("rewards", "status", "staked-run", "--json").output)
    assert status["stake_amount"] == 100
    (row,) = status["members"]
    assert (
        row["wallet"] == str(staker.pubkey())
        and row["staked"] == 100
        and row["stake_state"] == "Staked"
    )

    assert "not in the state" in helpers.one_error_line(
        ws.cli("rewards", "unstake", "staked-run", "--withdraw", *as_staker)
    )
    unstaking = json.loads(ws.cli("rewards", "unstake", "staked-run", *as_staker, "--json").output)
    assert unstaking["state"] == "Unstaking" and unstaking["amount"] == 100
    assert "not over yet" in helpers.one_error_line(
        ws.cli("rewards", "unstake", "staked-run", "--withdraw", *as_staker)
    )
    ws.localnet.warp(floor + 1)
    withdrawn = ws.cli("rewards", "unstake", "staked-run", "--withdraw", *as_staker, "--json")
    assert withdrawn.exit_code == 0, withdrawn.output
    out = json.loads(withdrawn.output)
    assert out["amount"] == 100

    async def balance(address: str) -> int:
        async with Rpc(ws.localnet.net.http_url, idl=core.idl) as rpc:
            return await spl_token.balance(rpc, Pubkey.from_string(address))

    assert asyncio.run(balance(out["to"])) == 100 and asyncio.run(balance(source)) == 0
    assert json.loads(ws.cli("rewards", "status", "staked-run", "--json").output)["members"] == []
