"""Answers that name the real problem: an RPC URL that does not answer says so before any program id is
looked up, and a --program-id that is not the coordinator (an account, another program) says so instead of
listing "no runs"."""

from __future__ import annotations

import asyncio
from pathlib import Path

from support.event_forger import forger_elf

from cohort.sdk.deploy import deploy_program
from cohort.sdk.rpc import Rpc


def test_a_mistyped_cluster_url_reads_cannot_reach(workspace, helpers):
    for url in ("http://127.0.0.1:9", "http://no-such-host.invalid:8899"):
        for command in (
            ("run", "list"),
            ("run", "status", "example-kjv"),
            ("explorer", "--port", "0"),
        ):
            line = helpers.one_error_line(workspace.cli(*command, "-u", url))
            assert f"cannot reach the RPC at {url}" in line and "program id" not in line, line


def test_a_program_id_that_is_not_the_coordinator_is_named_as_such(
    workspace, helpers, tmp_path: Path
):
    wallet = str(workspace.wallet.pubkey())
    line = helpers.one_error_line(workspace.cli("run", "list", "--program-id", wallet))
    assert (
        f"{wallet} on localnet" in line and "is not a program" in line and "owned by 1111" in line
    )

    system = "11111111111111111111111111111111"  # a native program: executable, no coordinator code
    line = helpers.one_error_line(workspace.cli("run", "list", "--program-id", system))
    assert "is not cohort's coordinator" in line, line

    async def deploy_forger() -> str:  # a real SBF program of loader v3 that is not the coordinator
        async with Rpc(workspace.localnet.net.http_url) as rpc:
            done = await deploy_program(
                rpc, workspace.wallet, forger_elf(), tmp_path / "forger.json"
            )
            return str(done.program_id)

    forger = asyncio.run(deploy_forger())
    for command in (("run", "list"), ("run", "list", "--json"), ("run", "status", "example-kjv")):
        line = helpers.one_error_line(workspace.cli(*command, "--program-id", forger))
        assert f"program {forger} on localnet" in line and "is not cohort's coordinator" in line, (
            line
        )

    # the coordinator itself passes, runs or not
    listed = workspace.cli("run", "list", "--program-id", str(workspace.program_id))
    assert listed.exit_code == 0, listed.output


def test_the_explorer_refuses_a_program_that_is_not_the_coordinator(workspace, helpers):
    wallet = str(workspace.wallet.pubkey())
    line = helpers.one_error_line(workspace.cli("explorer", "--port", "0", "--program-id", wallet,
                                                "--db", str(workspace.root / "refused.sqlite")))  # fmt: skip
    assert "is not a program" in line, line
    line = helpers.one_error_line(workspace.cli("explorer", "--port", "0", "--also-program",
                                                "11111111111111111111111111111111",
                                                "--db", str(workspace.root / "refused.sqlite")))  # fmt: skip
    assert "is not cohort's coordinator" in line, line
