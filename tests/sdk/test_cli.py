"""The `cohort` command line: help, build, and clear errors."""

from __future__ import annotations

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


def test_build_of_an_unknown_program_is_a_clear_error():
    result = CliRunner().invoke(cli, ["build", "no_such_program"])
    assert result.exit_code == 1
    assert "unknown program" in result.output and "coordinator" in result.output


def test_localnet_start_validates_its_options():
    result = CliRunner().invoke(cli, ["localnet", "start", "--port", "70000"])
    assert result.exit_code != 0
    assert "port" in result.output.lower()
