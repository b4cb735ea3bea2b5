"""The CLI against a localnet running the real program: deploy, create, status, pause/resume, update, list,
close — the flow a run creator follows."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest
from support.scripted_run import convict_by_checks, funded_run, start_epoch

from cohort.sdk import loader_v3
from cohort.sdk.deploy import buffer_keypair_path, deploy_program
from cohort.sdk.rpc import Rpc
from cohort.sdk.run_config import load_run_file
from cohort.sdk.wallet import load_keypair


def status(ws, run: str) -> dict:
    result = ws.cli("run", "status", run, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_deploy_records_the_program_id_and_deploying_again_upgrades(workspace):
    # the id goes to the untracked local file, not into the (usually tracked) Anchorfile
    assert str(workspace.program_id) not in workspace.anchorfile.read_text()
    local = workspace.root / ".cohort" / "programs.toml"
    assert f'coordinator = "{workspace.program_id}"' in local.read_text()
    assert (workspace.root / ".cohort" / ".gitignore").read_text().splitlines()[-1] == "*"
    program = workspace.localnet.rpc(
        "getAccountInfo", str(workspace.program_id), {"encoding": "jsonParsed"}
    )
    assert program["value"]["data"]["program"] == "bpf-upgradeable-loader"
    workspace.localnet.warp(2)  # an upgrade in the deploy's own slot is refused, as on a validator
    result = workspace.cli("deploy", "--program-keypair", str(workspace.program_keypair))
    assert result.exit_code == 0, result.output
    assert (
        result.output.startswith("upgraded coordinator")
        and str(workspace.program_id) in result.output
    )


def test_an_interrupted_deploy_resumes(workspace, coordinator_elf: bytes, tmp_path: Path):
    keypair = tmp_path / "resumed-keypair.json"
    payer = load_keypair(workspace.root / "id.json")

    class Interrupted(Exception):
        pass

    def stop_after_some(done: int, total: int) -> None:
        if done >= total // 3:
            raise Interrupted

    async def interrupted_deploy() -> None:
        async with Rpc(workspace.localnet.net.http_url) as rpc:
            with pytest.raises(Interrupted):
                await deploy_program(
                    rpc, payer, coordinator_elf, keypair, progress=stop_after_some, concurrency=4
                )

    asyncio.run(interrupted_deploy())
    assert buffer_keypair_path(keypair).exists()  # kept so the next deploy finds its buffer
    result = workspace.cli("deploy", "--program-keypair", str(keypair), "--program-id", "unused")
    assert result.exit_code == 0, result.output
    written = int(re.search(r"(\d+) already written", result.output).group(1))
    chunks = -(-len(coordinator_elf) // loader_v3.max_write_chunk(payer.pubkey(), payer.pubkey()))
    assert 0 < written < chunks and "deployed coordinator" in result.output
    assert not buffer_keypair_path(keypair).exists()
    workspace.restore_default_program()


def test_create_status_pause_update_resume_list_close(workspace, helpers, tmp_path: Path):
    ws = workspace
    one_error_line, config_copy = helpers.one_error_line, helpers.config_copy
    result = ws.cli("run", "create", str(helpers.EXAMPLE))
    assert result.exit_code == 0, result.output
    assert "created run example-kjv" in result.output and "open for members" in result.output
    s = status(ws, "example-kjv")
    assert (s["phase"], s["epoch"], s["step"], s["total_steps"]) == (
        "WaitingForMembers",
        0,
        1,
        2000,
    )
    assert s["name"] == "KJV Llama 20M" and s["checkpoint"]["repo"] == "cohort/llama-20m"
    assert s["authority"] == str(ws.wallet.pubkey())
    human = ws.cli("run", "status", "example-kjv")
    assert (
        human.exit_code == 0 and "WaitingForMembers" in human.output and "1 / 2000" in human.output
    )

    # the program refuses config changes while the run is live, by name, and nothing changes
    changed = config_copy(tmp_path, "example-kjv", **{"total_steps = 2000": "total_steps = 3000",
                                                       'name = "KJV Llama 20M"': 'name = "KJV v2"'})  # fmt: skip
    line = one_error_line(ws.cli("run", "update", "example-kjv", str(changed)))
    assert "NotHalted" in line
    after = status(ws, "example-kjv")
    assert (
        after["nonce"] == s["nonce"] and after["total_steps"] == 2000
    )  # a refused update changes nothing

    result = ws.cli("run", "pause", "example-kjv")
    assert result.exit_code == 0 and "Paused" in result.output, result.output
    result = ws.cli("run", "update", "example-kjv", str(changed))
    assert result.exit_code == 0, result.output
    s = status(ws, "example-kjv")
    assert (s["phase"], s["total_steps"], s["name"], s["step"]) == ("Paused", 3000, "KJV v2", 1)
    result = ws.cli("run", "resume", "example-kjv")
    assert result.exit_code == 0 and "WaitingForMembers" in result.output, result.output

    # a second run: both listed
    second = config_copy(tmp_path, "second-run")
    assert ws.cli("run", "create", str(second), "--paused").exit_code == 0
    listed = json.loads(ws.cli("run", "list", "--json").output)
    by_id = {r["run_id"]: r for r in listed}
    assert by_id["example-kjv"]["phase"] == "WaitingForMembers"
    assert by_id["second-run"]["phase"] == "Uninitialized"  # configured, not yet opened
    table = ws.cli("run", "list")
    assert "example-kjv" in table.output and "second-run" in table.output

    # close: only while halted; then the run is gone
    assert "NotHalted" in one_error_line(ws.cli("run", "close", "example-kjv"))
    assert ws.cli("run", "pause", "example-kjv").exit_code == 0
    before = ws.localnet.rpc("getBalance", str(ws.wallet.pubkey()))["value"]
    result = ws.cli("run", "close", "example-kjv")
    assert result.exit_code == 0, result.output
    assert ws.localnet.rpc("getBalance", str(ws.wallet.pubkey()))["value"] > before  # rent refunded
    assert "no run 'example-kjv'" in one_error_line(ws.cli("run", "status", "example-kjv"))
    assert "example-kjv" not in {
        r["run_id"] for r in json.loads(ws.cli("run", "list", "--json").output)
    }


def test_status_shows_failed_checks_disputes_and_convictions(workspace, helpers, core, tmp_path):
    """`run status` shows what the chain holds about checks, per member of the epoch: an open tally of failure
    reports (1 of 2 verifiers), then the dispute it opened (its committee not drawn yet), then the conviction
    and the registry's ban; the run-wide counts of the maxima. A run with nothing to show has no such column."""
    config = helpers.config_copy(
        tmp_path, "status-checked", **{"verification_percent = 5 ": "verification_percent = 100 "}
    )
    run_file = load_run_file(config, core)
    seen: dict[str, tuple[dict, str]] = {}

    async def look(stage: str, facts: dict) -> None:
        as_json = await asyncio.to_thread(status, workspace, "status-checked")
        text = await asyncio.to_thread(workspace.cli, "run", "status", "status-checked")
        assert text.exit_code == 0, text.output
        seen[stage] = (as_json, text.output)

    async def play() -> dict:
        async with funded_run(workspace, core, run_file) as (_, client, members):
            await start_epoch(client, "status-checked", members)
            await look("started", {})
            return await convict_by_checks(client, "status-checked", members, look)

    facts = asyncio.run(play())
    step, trainer = facts["step"], facts["trainer"]
    wallet = str(facts["wallets"][trainer].pubkey())

    def member(stage: str) -> dict:
        (m,) = [m for m in seen[stage][0]["verification"]["members"] if m["index"] == trainer]
        assert m["wallet"] == wallet
        return m

    started, text = seen["started"]
    assert started["verification"] == {"open_checks": 0, "check_slots": 16, "open_disputes": 0,
                                       "max_disputes": 4, "members": started["verification"]["members"],
                                       "banned": []}  # fmt: skip
    assert len(started["verification"]["members"]) == 3
    assert "checks" not in text  # nothing to show: no column, no line

    v, text = seen["reported"]
    assert (v["verification"]["open_checks"], v["verification"]["open_disputes"]) == (1, 0)
    assert member("reported") == {"index": trainer, "wallet": wallet, "convicted": False, "banned_until": None,
                                  "failed_checks": [{"step": step, "reports": 1, "verifiers": 2, "disputed": False}],
                                  "disputes": []}  # fmt: skip
    assert f"check s{step} 1/2 failed" in text and "open: 1/16 check tallies, 0/4 disputes" in text

    v, text = seen["disputed"]
    assert (v["verification"]["open_checks"], v["verification"]["open_disputes"]) == (1, 1)
    m = member("disputed")
    assert m["failed_checks"] == [{"step": step, "reports": 2, "verifiers": 2, "disputed": True}]
    (dispute,) = m["disputes"]
    assert (dispute["step"], dispute["fails"], dispute["passes"], dispute["committee"]) == (
        step,
        0,
        0,
        None,
    )
    assert f"dispute s{step} 0 fail 0 pass committee not drawn yet" in text
    assert f"check s{step}" not in text and "1/16 check tallies, 1/4 disputes" in text

    v, text = seen["convicted"]
    ban = v["epoch"] + 1 + run_file.config.conviction_ban_epochs
    assert (v["verification"]["open_checks"], v["verification"]["open_disputes"]) == (0, 0)
    assert member("convicted") == {"index": trainer, "wallet": wallet, "convicted": True, "banned_until": ban,
                                   "failed_checks": [], "disputes": []}  # fmt: skip
    assert v["verification"]["banned"] == [{"wallet": wallet, "banned_until": ban}]
    assert next(c for c in v["clients"] if c["index"] == trainer)["health"] == "Convicted"
    assert f"convicted, banned until epoch {ban}" in text and "0/4 disputes; 1 convicted" in text
