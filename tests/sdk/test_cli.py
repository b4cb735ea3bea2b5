"""The `cohort` command line: help, build, and clear errors."""

from __future__ import annotations

import json

from click.testing import CliRunner

from cohort.sdk.cli import cli


def test_help_lists_the_commands():
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0
    for command in ("build", "demo", "localnet"):
        assert command in result.output


def test_build_reports_each_program():
    result = CliRunner().invoke(cli, ["build", "toolchain_probe"])
    assert result.exit_code == 0, result.output
    assert "toolchain_probe" in result.output and ".so" in result.output
    as_json = CliRunner().invoke(cli, ["build", "toolchain_probe", "--json"])
    assert as_json.exit_code == 0, as_json.output
    (built,) = json.loads(as_json.output)
    assert (
        built["program"] == "toolchain_probe" and built["bytes"] > 0 and built["so"].endswith(".so")
    )


def test_build_of_an_unknown_program_is_a_clear_error():
    result = CliRunner().invoke(cli, ["build", "no_such_program"])
    assert result.exit_code == 1
    assert "unknown program" in result.output and "coordinator" in result.output


def test_localnet_start_validates_its_options():
    result = CliRunner().invoke(cli, ["localnet", "start", "--port", "70000"])
    assert result.exit_code != 0
    assert "port" in result.output.lower()


def test_every_subcommand_has_help():
    groups = {"run": ["create", "update", "pause", "resume", "status", "list", "watch", "close"],
              "wallet": ["new", "address", "balance", "airdrop"]}  # fmt: skip
    top = CliRunner().invoke(cli, ["--help"]).output
    for command in ("deploy", "run", "wallet"):
        assert command in top
    paths = [["deploy"]] + [[g, c] for g, cs in groups.items() for c in cs]
    for path in paths:
        result = CliRunner().invoke(cli, [*path, "--help"])
        assert result.exit_code == 0, result.output
        summary = result.output.split("\n\n")[1].strip()
        assert len(summary) > 20, (path, result.output)
        if path[0] != "wallet" or path[1] in ("balance", "airdrop"):
            assert "--cluster" in result.output or path[1:] in (["new"], ["address"])
