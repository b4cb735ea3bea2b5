"""RunClient.report_check over real RPC: with verification_percent = 100 the epoch's first step is checked
once the seed of its round + CHECK_SEED_LAG is revealed; the verifiers CoordinatorCore.check_plan names
report, and the second of the two (three members: two verifiers) opens a dispute; once its committee's seed
is out, the committee (the same two) reports and convicts the trainer."""

from __future__ import annotations

import pytest
from support.scripted_run import funded_run, start_epoch, submit_witnesses

from cohort.sdk.errors import ProgramError
from cohort.sdk.models import CheckFailed, CheckFailure
from cohort.sdk.run_config import load_run_file


async def test_verifiers_report_and_a_majority_convicts(workspace, helpers, core, tmp_path):
    config = helpers.config_copy(
        tmp_path, "checked", **{"verification_percent = 5 ": "verification_percent = 100 "}
    )
    run_file = load_run_file(config, core)
    assert run_file.config.verification_percent == 100
    async with funded_run(workspace, core, run_file) as (rpc, client, members):
        run = await start_epoch(client, "checked", members)
        # the round of height 3 reveals the seed of height 4: the first step's checks
        for _ in range(3):
            await submit_witnesses(client, run, members)
            await client.start_pending_round(members[0], "checked")
            run = await client.fetch_run("checked")
        assert run.config.verification_percent == 100
        step, trainer = run.start_step, 0
        seed = run.check_seed(step)
        assert seed is not None and seed == core.check_seed(run.data[8:], step)
        verifiers = core.check_plan(run.data[8:], step, seed, trainer)
        assert len(verifiers) == 2 and trainer not in verifiers  # three members: the two others
        wallet = {c.index: next(m for m in members if m.pubkey() == c.signer) for c in run.clients}

        first, second = wallet[verifiers[0]], wallet[verifiers[1]]
        with pytest.raises(ValueError):
            await client.report_check(first, "checked", step, trainer, "Lazy")
        signature = await client.report_check(
            first, "checked", step, trainer, CheckFailure.PayloadMismatch
        )
        events = core.idl.events_in_logs(
            await rpc.transaction_logs(signature), workspace.program_id
        )
        assert [CheckFailed.decode(e) for name, e in events if name == "CheckFailed"] == [
            CheckFailed(run.address, first.pubkey(), step, trainer, CheckFailure.PayloadMismatch, 1)]  # fmt: skip
        assert (await client.fetch_run("checked")).clients[
            trainer
        ].state == "Healthy"  # one of two: nothing
        with pytest.raises(ProgramError) as refused:
            await client.report_check(first, "checked", step, trainer, "StateMismatch")
        assert refused.value.name == "DuplicateReport"

        signature = await client.report_check(
            second, run.address, step, trainer, "StateNotDelivered"
        )
        events = core.idl.events_in_logs(
            await rpc.transaction_logs(signature), workspace.program_id
        )
        assert [name for name, _ in events] == ["CheckFailed", "DisputeOpened"]
        assert (await client.fetch_run("checked")).clients[trainer].state == "Healthy"
        # the committee's seed: DISPUTE_SEED_LAG rounds after the one it opened in
        for _ in range(2):
            run = await client.fetch_run("checked")
            await submit_witnesses(client, run, members)
            await client.start_pending_round(members[0], "checked")
        run = await client.fetch_run("checked")
        assert core.dispute_committee(run.data[8:], step, trainer) == set(verifiers)
        await client.report_check(first, "checked", step, trainer, "PayloadMismatch")
        signature = await client.report_check(
            second, "checked", step, trainer, CheckFailure.StateMismatch
        )
        events = core.idl.events_in_logs(
            await rpc.transaction_logs(signature), workspace.program_id
        )
        convicted = [e for name, e in events if name == "ClientConvicted"]
        assert [(e["index"], e["reason"], e["step"]) for e in convicted] == [
            (trainer, "FailedVerification", step)
        ]
        assert (await client.fetch_run("checked")).clients[trainer].state == "Convicted"
