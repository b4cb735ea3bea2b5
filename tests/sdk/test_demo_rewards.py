"""The demo's reward pool on the localnet, without training: `fund_pool` deploys the treasurer and funds a
fresh mint's vault, members earn points in a scripted epoch, and `payout` / `payout_summary` print what each
can claim and claim it for one member."""

from __future__ import annotations

import asyncio
from pathlib import Path

from support.scripted_run import funded_run, play_epoch

from cohort.sdk import spl_token
from cohort.sdk.demo import POOL, REWARD_PER_POINT, fund_pool, payout, payout_summary
from cohort.sdk.run_config import load_run_file


def test_the_demo_pool_pays_each_member_its_settled_points(
    workspace, helpers, core, tmp_path: Path
):
    ws = workspace
    run_file = load_run_file(helpers.config_copy(tmp_path, "demo-pool"), core)

    async def scenario() -> None:
        async with funded_run(ws, core, run_file) as (rpc, client, members):
            run = await client.resolve("demo-pool")
            pool = await fund_pool(rpc, ws.wallet, ws.program_id, run, tmp_path / "treasurer.json")
            mint = await spl_token.read_mint(rpc, pool.mint)
            assert mint.mint_authority == ws.wallet.pubkey()
            await play_epoch(client, "demo-pool", members)
            earned = {p.wallet: p.unclaimed for p in await client.points(run)}
            assert all(earned[m.pubkey()] > 0 for m in members)

            status, claimed = await payout(client, pool, ws.wallet, members, members[0])
            rows = {m.wallet: m for m in status.members}
            for member in members:
                row = rows[str(member.pubkey())]
                assert row.settled_points == earned[member.pubkey()] and row.unsettled_points == 0
                assert row.earned == row.settled_points * REWARD_PER_POINT
            first = rows[str(members[0].pubkey())]
            assert claimed == first.earned == first.claimed and first.claimable == 0
            assert status.vault_balance == POOL - claimed  # tokens conserved

            names = {str(m.pubkey()): f"client-{i}" for i, m in enumerate(members)}
            lines = payout_summary(status, names, claimed, "client-0")
            assert lines[0].startswith(
                f"vault {status.amount(POOL - claimed)} tokens of mint {pool.mint}"
            )
            second = rows[str(members[1].pubkey())]
            assert any(
                line.startswith("client-1 (")
                and f"can claim {status.amount(second.claimable)} " in line
                for line in lines
            ), lines
            assert (
                lines[-1]
                == f"client-0 claimed {status.amount(claimed)} tokens to its own token account"
            )

    asyncio.run(scenario())
