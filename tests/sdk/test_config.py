"""Workspace settings (Anchorfile, clusters, precedence of flags and environment) and wallet files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from solders.keypair import Keypair

from cohort.sdk.cli import cli
from cohort.sdk.config import (
    load_workspace,
    resolve_cluster,
    resolve_program_id,
    resolve_wallet,
    write_program_id,
    ws_url_for,
)
from cohort.sdk.errors import ConfigError, WalletError
from cohort.sdk.wallet import load_keypair, save_keypair

ANCHORFILE = """# the workspace
[provider]
cluster = "mine"
wallet = "keys/id.json"

[clusters]
mine = ["http://127.0.0.1:7000", "http://10.0.0.2:8899"]
devnet = "https://api.devnet.solana.com"

[programs.localnet]

[programs.devnet]
other = "x"
"""


@pytest.fixture
def anchorfile(tmp_path: Path, monkeypatch) -> Path:
    for var in (
        "COHORT_CLUSTER",
        "COHORT_WALLET",
        "COHORT_PROGRAM_ID",
        "COHORT_ANCHORFILE",
        "COHORT_WS_URL",
    ):
        monkeypatch.delenv(var, raising=False)
    path = tmp_path / "Anchorfile.toml"
    path.write_text(ANCHORFILE)
    return path


def test_clusters_by_name_url_and_fallback_list(anchorfile: Path):
    ws = load_workspace(anchorfile)
    mine = resolve_cluster(ws)
    assert mine.name == "mine" and mine.urls == ("http://127.0.0.1:7000", "http://10.0.0.2:8899")
    assert mine.ws_url == "ws://127.0.0.1:7001"  # the Solana CLI's rule: port + 1
    assert resolve_cluster(ws, "devnet").ws_url == "wss://api.devnet.solana.com"
    assert resolve_cluster(ws, "localnet").url == "http://127.0.0.1:8899"  # well known
    custom = resolve_cluster(ws, "http://a:1,http://b:2", ws_url="ws://c:3")
    assert custom.urls == ("http://a:1", "http://b:2") and custom.ws_url == "ws://c:3"
    assert resolve_cluster(ws, "http://127.0.0.1:7000").name == "mine"  # a known URL keeps its name
    with pytest.raises(ConfigError, match="unknown cluster 'nowhere'"):
        resolve_cluster(ws, "nowhere")
    with pytest.raises(ConfigError, match="not an http"):
        resolve_cluster(ws, "ftp://x")
    assert ws_url_for("http://[::1]:8899") == "ws://[::1]:8900"


def test_flags_beat_environment_beat_anchorfile(anchorfile: Path, monkeypatch):
    ws = load_workspace(anchorfile)
    assert (
        resolve_wallet(ws) == anchorfile.parent / "keys" / "id.json"
    )  # relative to the Anchorfile
    monkeypatch.setenv("COHORT_WALLET", "/env/id.json")
    monkeypatch.setenv("COHORT_CLUSTER", "devnet")
    assert resolve_wallet(ws) == Path("/env/id.json")
    assert resolve_wallet(ws, "/flag/id.json") == Path("/flag/id.json")
    assert resolve_cluster(ws).name == "devnet" and resolve_cluster(ws, "mine").name == "mine"


def test_program_ids_are_written_under_the_cluster_keeping_the_file(anchorfile: Path):
    ws = load_workspace(anchorfile)
    with pytest.raises(ConfigError, match="cohort deploy --cluster localnet"):
        resolve_program_id(ws, resolve_cluster(ws, "localnet"))
    first, second = Keypair().pubkey(), Keypair().pubkey()
    write_program_id(anchorfile, "localnet", first)
    write_program_id(anchorfile, "devnet", first)
    write_program_id(anchorfile, "devnet", second)  # replaced, not duplicated
    write_program_id(anchorfile, "http://h:1", second)
    text = anchorfile.read_text()
    assert text.startswith("# the workspace") and text.count("coordinator =") == 3
    ws = load_workspace(anchorfile)
    assert ws.programs["localnet"]["coordinator"] == str(first)
    assert ws.programs["devnet"] == {"coordinator": str(second), "other": "x"}
    assert resolve_program_id(ws, resolve_cluster(ws, "http://h:1")) == second
    assert resolve_program_id(ws, resolve_cluster(ws, "devnet"), str(first)) == first


def test_bad_anchorfile_is_a_clear_error(tmp_path: Path):
    bad = tmp_path / "Anchorfile.toml"
    bad.write_text("[provider\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_workspace(bad)
    with pytest.raises(ConfigError, match="no Anchorfile"):
        load_workspace(tmp_path / "missing.toml")


def test_wallet_files_are_solana_keygen_format(tmp_path: Path, monkeypatch):
    monkeypatch.delenv("COHORT_WALLET", raising=False)
    path = tmp_path / "id.json"
    result = CliRunner().invoke(cli, ["wallet", "new", "-k", str(path)])
    assert result.exit_code == 0, result.output
    raw = json.loads(path.read_text())
    assert len(raw) == 64 and all(0 <= b < 256 for b in raw)
    assert path.stat().st_mode & 0o777 == 0o600
    keypair = Keypair.from_bytes(bytes(raw))
    assert f"pubkey: {keypair.pubkey()}" in result.output.splitlines()
    address = CliRunner().invoke(cli, ["wallet", "address", "-k", str(path)])
    assert address.output.strip() == str(keypair.pubkey())
    again = CliRunner().invoke(cli, ["wallet", "new", "-k", str(path)])
    assert again.exit_code == 1 and "already exists" in again.output
    assert load_keypair(path) == keypair
    with pytest.raises(WalletError, match="already exists"):
        save_keypair(Keypair(), path)
    path.write_text("not json")
    with pytest.raises(WalletError, match="cannot read wallet"):
        load_keypair(path)


def test_wallet_balance_and_airdrop_on_the_localnet(workspace):
    fresh = workspace.new_wallet("fresh")
    result = workspace.cli("wallet", "airdrop", "2.5", "-k", str(fresh))
    assert result.exit_code == 0 and result.output.strip().endswith("2.5 SOL"), result.output
    assert workspace.cli("wallet", "balance", "-k", str(fresh)).output.strip() == "2.5 SOL"
    line = workspace.cli("wallet", "airdrop", "-1")
    assert line.exit_code != 0
