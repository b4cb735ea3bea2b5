"""`run create` is resumable: when the RPC dies after the run's account exists but before it is configured
and opened, running the same command again completes the run instead of calling it "already exists"."""

from __future__ import annotations

import json

from aiohttp import web


def status(ws, run: str) -> dict:
    result = ws.cli("run", "status", run, "--json", "--program-id", str(ws.program_id))
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def dies_after_sends(sends: int):
    """A proxy rule: forward until `sends` transactions went through, then answer 503 to every send."""
    seen = [0]

    def rule(method: str, n: int) -> web.Response | None:
        if method != "sendTransaction":
            return None
        seen[0] += 1
        return None if seen[0] <= sends else web.Response(status=503, text="down")

    return rule


def test_a_create_cut_off_half_way_is_completed_by_the_next(
    workspace, helpers, rpc_proxy, tmp_path
):
    ws = workspace
    config = helpers.config_copy(tmp_path, "resumed-run")
    proxy = rpc_proxy(dies_after_sends(1))  # the account is created; its config is not sent yet
    line = helpers.one_error_line(ws.cli("run", "create", str(config), "--cluster", proxy.url,
                                         "--program-id", str(ws.program_id)))  # fmt: skip
    assert "cannot reach the RPC" in line and "HTTP 503" in line
    half = status(ws, "resumed-run")
    assert half["phase"] == "Uninitialized" and half["name"] == ""  # metadata never arrived

    before = ws.localnet.transaction_count()
    result = ws.cli("run", "create", str(config), "--program-id", str(ws.program_id))
    assert result.exit_code == 0, result.output
    assert "created run resumed-run" in result.output and "open for members" in result.output
    # only what is missing: config, model and metadata in one transaction, then open (no second account)
    assert ws.localnet.transaction_count() - before == 2
    done = status(ws, "resumed-run")
    assert done["address"] == half["address"]
    assert (done["phase"], done["name"], done["total_steps"]) == (
        "WaitingForMembers", "KJV Llama 20M", 2000
    )  # fmt: skip
    assert done["checkpoint"]["repo"] == "cohort/llama-20m"


def test_a_create_is_three_transactions(workspace, helpers, tmp_path):
    """Account + RunIndex, then config + model + metadata (one packet, all or nothing), then open."""
    config = helpers.config_copy(tmp_path, "three-transactions")
    before = workspace.localnet.transaction_count()
    result = workspace.cli("run", "create", str(config), "--program-id", str(workspace.program_id))
    assert result.exit_code == 0, result.output
    assert workspace.localnet.transaction_count() - before == 3
    assert status(workspace, "three-transactions")["name"] == "KJV Llama 20M"


def test_a_live_run_or_another_authoritys_run_is_still_refused(workspace, helpers, tmp_path):
    ws = workspace
    program = {"COHORT_PROGRAM_ID": str(ws.program_id)}
    config = helpers.config_copy(tmp_path, "taken-run")
    assert ws.cli("run", "create", str(config), env=program).exit_code == 0
    line = helpers.one_error_line(ws.cli("run", "create", str(config), env=program))
    assert "already exists and is WaitingForMembers" in line and "run update" in line

    paused = helpers.config_copy(tmp_path, "someone-elses")
    # never opened
    assert ws.cli("run", "create", str(paused), "--paused", env=program).exit_code == 0
    stranger = ws.new_wallet("stranger", 10)
    before = ws.localnet.transaction_count()
    line = helpers.one_error_line(
        ws.cli("run", "create", str(paused), "-k", str(stranger), env=program)
    )
    assert "already exists" in line and str(ws.wallet.pubkey()) in line
    assert ws.localnet.transaction_count() == before
