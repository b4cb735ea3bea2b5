"""The CLI against a localnet running the real program: deploy, create, status, pause/resume, update, list,
close — the flow a run creator follows."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest

from cohort.sdk import loader_v3
from cohort.sdk.deploy import buffer_keypair_path, deploy_program
from cohort.sdk.rpc import Rpc
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
