"""The Solana CLI's conventions: BIP39 seed phrases derived as solana-keygen derives them, its config file
(`~/.config/solana/cli/config.yml`) as a default below cohort's own settings, its short cluster names, and
`--json` on the commands that print a result."""

from __future__ import annotations

import hashlib
import json
import unicodedata
from pathlib import Path

import pytest
from click.testing import CliRunner
from solders.keypair import Keypair

from cohort.sdk.cli import cli
from cohort.sdk.config import load_solana_config, load_workspace, resolve_cluster, resolve_wallet
from cohort.sdk.errors import ConfigError, WalletError
from cohort.sdk.wallet import (
    check_seed_phrase,
    keypair_from_seed_phrase,
    load_keypair,
    new_seed_phrase,
)

# the BIP39 reference vector (trezor/python-mnemonic vectors.json, English, passphrase "TREZOR")
VECTOR_PHRASE = "legal winner thank year wave sausage worth useful legal winner thank yellow"
VECTOR_SEED = ("2e8905819b8723fe2c1d161860e5ee1830318dbf49a83bd451cfb8440c28bd6f"
               "a457fe1296106559a3c80937a1c1069be3a3a5bd381ee6260e8d9739fce1f607")  # fmt: skip
# solana-keygen: keypair_from_seed(seed[..32]), an ed25519 key from the seed's first 32 bytes
VECTOR_ADDRESS = "5emnAsg7AQ5Nh8DxRbATbgyCLQj2X9x5zHdWnt2Gkeie"

COHORT_VARS = (
    "COHORT_CLUSTER",
    "COHORT_WALLET",
    "COHORT_PROGRAM_ID",
    "COHORT_ANCHORFILE",
    "COHORT_WS_URL",
)


def test_seed_phrase_derivation_matches_the_bip39_vector_and_solana_keygen():
    seed = hashlib.pbkdf2_hmac("sha512", VECTOR_PHRASE.encode(), b"mnemonicTREZOR", 2048)
    assert seed.hex() == VECTOR_SEED  # the vector is what BIP39 says
    keypair = keypair_from_seed_phrase(VECTOR_PHRASE, "TREZOR")
    assert keypair == Keypair.from_seed(seed[:32])
    assert str(keypair.pubkey()) == VECTOR_ADDRESS
    # spacing and case do not matter; the passphrase is NFKD-normalized as BIP39 says
    assert (
        keypair_from_seed_phrase("  " + VECTOR_PHRASE.upper().replace(" ", "\t "), "TREZOR")
        == keypair
    )
    composed, decomposed = "caf\u00e9", "cafe\u0301"
    expected = hashlib.pbkdf2_hmac("sha512", VECTOR_PHRASE.encode(),
                                   ("mnemonic" + unicodedata.normalize("NFKD", composed)).encode(), 2048)  # fmt: skip
    assert keypair_from_seed_phrase(VECTOR_PHRASE, composed) == Keypair.from_seed(expected[:32])
    assert keypair_from_seed_phrase(VECTOR_PHRASE, decomposed) == Keypair.from_seed(expected[:32])


def test_new_seed_phrases_are_valid_and_bad_ones_say_why():
    for words in (12, 24):
        phrase = new_seed_phrase(words)
        assert len(phrase.split()) == words and check_seed_phrase(phrase) == phrase
    with pytest.raises(WalletError, match="this one has 3"):
        check_seed_phrase("legal winner thank")
    with pytest.raises(WalletError, match="12:'yelow'"):
        check_seed_phrase(VECTOR_PHRASE.replace("yellow", "yelow"))
    with pytest.raises(WalletError, match="checksum"):
        check_seed_phrase(VECTOR_PHRASE.replace("yellow", "legal"))


def test_wallet_new_prints_a_seed_phrase_that_recover_turns_back_into_the_keypair(
    tmp_path: Path, monkeypatch
):
    for var in COHORT_VARS:
        monkeypatch.delenv(var, raising=False)
    runner = CliRunner()
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    made = runner.invoke(cli, ["wallet", "new", "-k", str(first), "--json"])
    assert made.exit_code == 0, made.output
    answer = json.loads(made.output)
    assert answer["path"] == str(first) and not answer["bip39_passphrase"]
    assert answer["address"] == str(load_keypair(first).pubkey())
    back = runner.invoke(
        cli, ["wallet", "recover", "-k", str(second), "--json"], input=answer["seed_phrase"] + "\n"
    )
    assert back.exit_code == 0, back.output
    assert json.loads(back.output)["address"] == answer["address"]
    assert second.read_bytes() == first.read_bytes() and second.stat().st_mode & 0o777 == 0o600

    # with a BIP39 passphrase (the phrase alone then gives another key), in the plain output
    third, fourth = tmp_path / "third.json", tmp_path / "fourth.json"
    made = runner.invoke(cli, ["wallet", "new", "-k", str(third), "--bip39-passphrase", "--word-count", "24"],
                         input="s3cret\n")  # fmt: skip
    assert made.exit_code == 0, made.output
    lines = made.output.splitlines()
    address = str(load_keypair(third).pubkey())
    assert f"pubkey: {address}" in lines and "BIP39 passphrase" in lines[-2]
    phrase = lines[-1]
    assert len(phrase.split()) == 24
    assert keypair_from_seed_phrase(phrase, "s3cret").pubkey() == load_keypair(third).pubkey()
    back = runner.invoke(cli, ["wallet", "recover", "-k", str(fourth), "--bip39-passphrase"],
                         input=f"{phrase}\ns3cret\n")  # fmt: skip
    assert back.exit_code == 0 and f"pubkey: {address}" in back.output, back.output

    # mistakes: one line each, and nothing written
    for argv, given, message in (
        (["wallet", "recover", "-k", str(tmp_path / "x.json")], "legal winner thank\n", "this one has 3"),
        (["wallet", "recover", "-k", str(tmp_path / "x.json")], VECTOR_PHRASE.replace("yellow", "legal") + "\n",
         "checksum"),
        (["wallet", "recover", "-k", str(tmp_path / "x.json")], "", "nothing on stdin"),
        (["wallet", "recover", "-k", str(first)], VECTOR_PHRASE + "\n", "already exists"),
        (["wallet", "new", "-k", str(first)], "", "already exists"),
    ):  # fmt: skip
        result = runner.invoke(cli, argv, input=given)
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert result.exit_code == 1 and len(lines) == 1 and message in lines[0], result.output
    assert not (tmp_path / "x.json").exists()
    assert json.loads(runner.invoke(cli, ["wallet", "address", "-k", str(first), "--json"]).output) == {
        "path": str(first), "address": answer["address"]}  # fmt: skip


@pytest.fixture
def home(tmp_path: Path, monkeypatch) -> Path:
    """A temporary HOME, working directory without an Anchorfile, and no COHORT_* variables."""
    for var in COHORT_VARS:
        monkeypatch.delenv(var, raising=False)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return home


def solana_config(home: Path, text: str) -> Path:
    path = home / ".config" / "solana" / "cli" / "config.yml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_the_solana_cli_config_sits_below_flags_environment_and_anchorfile(home: Path, monkeypatch):
    # nothing configured: the defaults
    assert load_solana_config() is None
    assert resolve_cluster(load_workspace()).name == "localnet"
    assert resolve_wallet(load_workspace()) == home / ".config" / "solana" / "id.json"

    # as `solana config set --url devnet --keypair ...` writes it (serde_yaml)
    solana_config(home, "---\njson_rpc_url: \"https://api.devnet.solana.com\"\nwebsocket_url: ''\n"
                        "keypair_path: /keys/solana.json\naddress_labels:\n"
                        "  \"11111111111111111111111111111111\": System Program\ncommitment: confirmed\n")  # fmt: skip
    cluster = resolve_cluster(load_workspace())
    assert cluster.name == "devnet" and cluster.urls == ("https://api.devnet.solana.com",)
    assert cluster.ws_url == "wss://api.devnet.solana.com"
    assert resolve_wallet(load_workspace()) == Path("/keys/solana.json")

    # an Anchorfile without [provider] leaves them to the Solana config; one with [provider] wins
    anchorfile = Path.cwd() / "Anchorfile.toml"
    anchorfile.write_text('[clusters]\nmine = "http://127.0.0.1:7000"\n')
    assert resolve_cluster(load_workspace()).name == "devnet"
    assert resolve_wallet(load_workspace()) == Path("/keys/solana.json")
    anchorfile.write_text(
        '[provider]\ncluster = "mine"\nwallet = "me.json"\n\n[clusters]\nmine = "http://127.0.0.1:7000"\n'
    )
    assert resolve_cluster(load_workspace()).name == "mine"
    assert resolve_wallet(load_workspace()) == Path.cwd() / "me.json"

    # environment beats the Anchorfile, flags beat the environment
    monkeypatch.setenv("COHORT_CLUSTER", "t")
    monkeypatch.setenv("COHORT_WALLET", "/env/id.json")
    assert resolve_cluster(load_workspace()).name == "testnet"
    assert resolve_wallet(load_workspace()) == Path("/env/id.json")
    assert resolve_cluster(load_workspace(), "m").name == "mainnet-beta"
    assert resolve_wallet(load_workspace(), "/flag.json") == Path("/flag.json")

    # a custom websocket URL of the Solana config is used with its RPC URL; a bad URL names the file
    monkeypatch.delenv("COHORT_CLUSTER")
    anchorfile.unlink()
    solana_config(
        home, "json_rpc_url: http://localhost:8899\nwebsocket_url: ws://localhost:9999/\n"
    )
    cluster = resolve_cluster(load_workspace())
    assert cluster.name == "localnet" and cluster.ws_url == "ws://localhost:9999/"
    path = solana_config(home, "json_rpc_url: api.devnet.solana.com\n")
    with pytest.raises(
        ConfigError, match=f"{path} json_rpc_url: 'api.devnet.solana.com' is not an http"
    ):
        resolve_cluster(load_workspace())


def test_short_cluster_names_like_the_solana_cli(home: Path):
    workspace = load_workspace()
    for short, name in (("l", "localnet"), ("localhost", "localnet"), ("d", "devnet"), ("t", "testnet"),
                        ("m", "mainnet-beta"), ("mainnet", "mainnet-beta"), ("mainnet-beta", "mainnet-beta")):  # fmt: skip
        assert resolve_cluster(workspace, short).name == name
    assert (
        resolve_cluster(workspace, "https://api.devnet.solana.com").name == "devnet"
    )  # its program ids
    (Path.cwd() / "Anchorfile.toml").write_text('[clusters]\nlocalnet = "http://127.0.0.1:7000"\n')
    assert (
        resolve_cluster(load_workspace(), "l").url == "http://127.0.0.1:7000"
    )  # the workspace's localnet
    with pytest.raises(ConfigError, match=r"unknown cluster 'x'.*\(or l, d, t, m\)"):
        resolve_cluster(workspace, "x")


def test_the_cli_reads_the_solana_config_with_a_temporary_home(workspace, home: Path):
    """Outside any workspace, `solana config set --url URL --keypair PATH` is all cohort needs."""
    keypair = Keypair()
    wallet = home / "solana-id.json"
    wallet.write_text(json.dumps(list(bytes(keypair))))
    workspace.localnet.airdrop(keypair.pubkey(), 3)
    solana_config(
        home, f"json_rpc_url: {workspace.localnet.net.http_url}\nkeypair_path: {wallet}\n"
    )
    runner = CliRunner()
    balance = runner.invoke(cli, ["wallet", "balance", "--json"])
    assert balance.exit_code == 0, balance.output
    assert json.loads(balance.output) == {
        "address": str(keypair.pubkey()),
        "lamports": 3 * 10**9,
        "sol": 3.0,
    }
    # the session workspace's localnet by its short name, its wallet by the Anchorfile
    env = {"COHORT_ANCHORFILE": str(workspace.anchorfile)}
    short = runner.invoke(
        cli, ["wallet", "airdrop", "1", str(keypair.pubkey()), "-u", "l", "--json"], env=env
    )
    assert short.exit_code == 0, short.output
    answer = json.loads(short.output)
    assert (
        answer["lamports"] == 4 * 10**9
        and answer["requested_lamports"] == 10**9
        and answer["signature"]
    )


def test_run_commands_print_json(workspace, helpers, tmp_path: Path):
    config = helpers.config_copy(tmp_path, "json-run")
    created = workspace.cli("run", "create", str(config), "--paused", "--json")
    assert created.exit_code == 0, created.output
    answer = json.loads(created.output)
    assert (
        answer["run_id"] == "json-run" and answer["open"] is False and answer["memory"]["total"] > 0
    )
    resumed = json.loads(workspace.cli("run", "resume", "json-run", "--json").output)
    assert resumed["run_id"] == "json-run" and resumed["address"] == answer["address"]
    assert resumed["phase"] == "WaitingForMembers"
    paused = json.loads(workspace.cli("run", "pause", "json-run", "--json").output)
    assert paused["phase"] == "Paused"
    updated = json.loads(workspace.cli("run", "update", "json-run", str(config), "--json").output)
    assert updated == {"run": "json-run", "updated": False}
    grantee = str(Keypair().pubkey())
    granted = json.loads(workspace.cli("run", "authorize", "json-run", grantee, "--json").output)
    assert granted["wallet"] == grantee and granted["allowed"] and granted["join_policy"] == "Open"
    closed = json.loads(workspace.cli("run", "close", "json-run", "--json").output)
    assert closed == {
        "run": "json-run",
        "closed": True,
        "recipient": str(workspace.wallet.pubkey()),
    }
