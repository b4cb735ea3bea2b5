"""The explorer's rewards, at its JSON API, from a real localnet: a run with a treasury shows its vault (mint,
balance, rate) and each member's earned / claimed / staked, and a claim (a treasurer transaction, no
coordinator one) reaches the page; a run without a treasury answers as it always did."""

from __future__ import annotations

import asyncio
import time

import httpx2

from cohort.sdk.demo import POOL, REWARD_PER_POINT, fund_pool, payout


async def rewards_of(http: httpx2.AsyncClient, run: str, until, what: str) -> dict:
    deadline = time.monotonic() + 30
    while True:
        detail = (await http.get(f"/api/runs/{run}")).json()
        if "state" in detail and until(detail):
            return detail
        assert time.monotonic() < deadline, (
            f"the explorer did not show {what}: {detail.get('rewards')}"
        )
        await asyncio.sleep(0.1)


async def test_a_runs_rewards_and_a_claim_show_in_the_api(chain, tmp_path):
    await chain.create_run("paid")
    await chain.create_run("unpaid")
    run = await chain.client.resolve("paid")
    pool = await fund_pool(
        chain.rpc, chain.authority, chain.program_id, run, tmp_path / "treasurer.json"
    )
    members = await chain.members()
    await chain.play("paid", members)
    async with (
        chain.explorer(tmp_path / "x.sqlite", live=False, poll_interval=0.2,
                       treasurer_id=pool.treasurer.program_id) as ex,
        httpx2.AsyncClient(base_url=ex.url, timeout=10) as http,
    ):  # fmt: skip
        detail = await rewards_of(http, "paid", lambda d: "rewards" in d, "the treasury")
        rewards = detail["rewards"]
        assert (
            rewards["mint"] == str(pool.mint)
            and rewards["vault_balance"] == rewards["funded"] == POOL
        )
        assert rewards["reward_per_point"] == REWARD_PER_POINT and rewards["slashed"] == 0
        rows = {m["wallet"]: m for m in rewards["members"]}
        assert set(rows) == {str(m.pubkey()) for m in members}
        for row in rows.values():  # earned in the registry, not settled yet: nothing payable so far
            assert row["unsettled_points"] > 0 and row["settled_points"] == row["earned"] == 0
            assert row["staked"] == 0 and row["stake_state"] is None
        unpaid = await rewards_of(http, "unpaid", lambda d: True, "the run")
        assert "rewards" not in unpaid and "rewards" not in unpaid["state"]

        status, claimed = await payout(chain.client, pool, chain.authority, members, members[0])
        assert claimed > 0
        detail = await rewards_of(
            http, "paid", lambda d: d["rewards"]["claimed"] == claimed, "the claim"
        )
        rows = {m["wallet"]: m for m in detail["rewards"]["members"]}
        first = rows[str(members[0].pubkey())]
        assert first["claimed"] == first["earned"] == claimed and first["claimable"] == 0
        assert first["claim_key"] == str(members[0].pubkey())
        second = rows[str(members[1].pubkey())]
        assert (
            second["settled_points"] > 0
            and second["claimable"] == second["settled_points"] * REWARD_PER_POINT
        )
        assert detail["rewards"]["vault_balance"] == POOL - claimed
        assert detail["rewards"] == {**status.to_json()}
