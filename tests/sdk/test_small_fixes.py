"""Small hardening fixes: private wallet files whatever was there before, `run update` of the wrong file,
`authorize` on an Open run, the Anchorfile left alone by deploy, and one base58 codec in the code base."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from click.testing import CliRunner
from solders.keypair import Keypair

from cohort.sdk.cli import cli
from cohort.sdk.wallet import load_keypair, save_keypair

ROOT = Path(__file__).resolve().parents[2]


def test_a_wallet_is_private_even_over_a_world_readable_leftover(tmp_path: Path):
    wallet = tmp_path / "id.json"
    leftover = tmp_path / "id.json.tmp"
    leftover.write_text("junk")
    leftover.chmod(0o644)
    result = CliRunner().invoke(cli, ["wallet", "new", "--wallet", str(wallet)])
    assert result.exit_code == 0, result.output
    assert stat.S_IMODE(wallet.stat().st_mode) == 0o600
    assert leftover.read_text() == "junk"  # not reused, not written through
    assert str(load_keypair(wallet).pubkey()) in result.output


def test_a_wallet_is_not_written_through_a_planted_symlink(tmp_path: Path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    os.symlink(victim, tmp_path / "id.json.tmp")
    save_keypair(Keypair(), tmp_path / "id.json")
    assert victim.read_text() == "keep me"
    assert not (tmp_path / "id.json").is_symlink()
    assert [
        p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp") and p.name != "id.json.tmp"
    ] == []


def test_update_refuses_the_config_of_another_run(workspace, helpers, tmp_path: Path):
    ws = workspace
    program = {"COHORT_PROGRAM_ID": str(ws.program_id)}
    mine = helpers.config_copy(tmp_path, "update-target")
    assert ws.cli("run", "create", str(mine), "--paused", env=program).exit_code == 0
    other = helpers.config_copy(
        tmp_path, "another-run", **{"total_steps = 2000": "total_steps = 10"}
    )
    before = ws.localnet.transaction_count()
    line = helpers.one_error_line(ws.cli("run", "update", "update-target", str(other), env=program))
    assert "[run].id is 'another-run' but the run is 'update-target'" in line and str(other) in line
    assert ws.localnet.transaction_count() == before
    result = ws.cli("run", "update", "update-target", str(mine), env=program)
    assert result.exit_code == 0 and "already matches" in result.output, result.output
    assert ws.localnet.transaction_count() == before  # nothing to change: nothing sent


def test_authorize_on_an_open_run_says_it_has_no_effect(workspace, helpers, tmp_path: Path):
    ws = workspace
    program = {"COHORT_PROGRAM_ID": str(ws.program_id)}
    config = helpers.config_copy(tmp_path, "open-run")
    assert ws.cli("run", "create", str(config), env=program).exit_code == 0
    result = ws.cli("run", "authorize", "open-run", str(Keypair().pubkey()), env=program)
    assert result.exit_code == 0, result.output
    assert "is Open" in result.output and "no effect" in result.output


def test_deploy_leaves_the_anchorfile_alone(workspace, tmp_path: Path):
    before = workspace.anchorfile.read_bytes()
    keypair = tmp_path / "another-keypair.json"
    result = workspace.cli("deploy", "--no-build", "--program-keypair", str(keypair))
    assert result.exit_code == 0, result.output
    assert workspace.anchorfile.read_bytes() == before
    deployed = str(load_keypair(keypair).pubkey())
    assert (
        f'coordinator = "{deployed}"' in (workspace.root / ".cohort" / "programs.toml").read_text()
    )
    # read back by the next command without --program-id
    listed = workspace.cli("run", "list", "--json")
    assert listed.exit_code == 0 and json.loads(listed.output) == [], listed.output
    workspace.restore_default_program()


def test_one_base58_codec_in_the_code_base():
    alphabet = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
    holders = [
        str(path.relative_to(ROOT))
        for folder in ("sdk", "localnet", "clients", "contracts", "benchmarks")
        for path in (ROOT / folder).rglob("*.py")
        if alphabet in path.read_text()
    ]
    assert holders == ["localnet/cohort/localnet/codec.py"]
