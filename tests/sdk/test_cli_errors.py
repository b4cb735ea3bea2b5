"""Bad input to the CLI: one clear line, a non-zero exit, and nothing sent to the chain."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def nothing_sent(workspace):
    """Asserts at the end of the test that the localnet processed no transaction meanwhile."""
    before = workspace.localnet.transaction_count()
    yield
    assert workspace.localnet.transaction_count() == before, "a transaction was sent"


def test_missing_wallet(workspace, helpers, nothing_sent, tmp_path: Path):
    missing = tmp_path / "nobody.json"
    line = helpers.one_error_line(
        workspace.cli("run", "create", str(helpers.EXAMPLE), "--wallet", str(missing))
    )
    assert f"no wallet at {missing}" in line and "cohort wallet new" in line


def test_a_file_that_is_not_a_keypair(workspace, helpers, nothing_sent, tmp_path: Path):
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2, 3]")
    line = helpers.one_error_line(workspace.cli("run", "pause", "x", "--wallet", str(bad)))
    assert "not a solana-keygen keypair" in line


def test_unfunded_wallet(workspace, helpers, nothing_sent, tmp_path: Path):
    empty = workspace.new_wallet("empty")
    config = helpers.config_copy(tmp_path, "unfunded-run")
    line = helpers.one_error_line(workspace.cli("run", "create", str(config), "-k", str(empty)))
    assert "holds 0 SOL" in line and "creating a run needs about" in line
    line = helpers.one_error_line(
        workspace.cli("deploy", "-k", str(empty), "--program-keypair", str(tmp_path / "p.json"))
    )
    assert "holds 0 SOL" in line and "deploying" in line


# one malformed value per rule: (text in the example, replacement, what the error must say)
MALFORMED = [
    ('id = "malformed"', 'id = ""', "[run].id: must be 1 to 32 bytes"),
    ('id = "malformed"', 'id = "' + "x" * 33 + '"', "[run].id: must be 1 to 32 bytes"),
    ("checkpointers = []", 'checkpointers = ["not-a-key"]', "[run].checkpointers[0]"),
    ("[metadata]", "[metadata]\ncolour = 1", "[metadata]: unknown key 'colour'"),
    ("epoch_time = 1800", "epoch_time = -1", "[config].epoch_time: expected an integer"),
    ("warmup_time = 120", 'warmup_time = "2m"', "[config].warmup_time: expected an integer"),
    ("witness_nodes = 3", "witness_nodes = 70000", "[config].witness_nodes: expected an integer from 0 to 255"),
    ("epoch_time = 1800", "epoch_time = 0", "epoch_time must be > 0"),
    ("warmup_time = 120", "warmup_time = 1800", "warmup_time must be < epoch_time"),
    ("max_round_train_time = 30", "max_round_train_time = 0", "max_round_train_time must be > 0 and < epoch_time"),
    ("round_witness_time = 10", "round_witness_time = 0", "round_witness_time must be > 0 and < epoch_time"),
    ("round_witness_time = 10", "round_witness_time = 1800", "round_witness_time must be > 0 and < epoch_time"),
    ("max_round_train_time = 30", "max_round_train_time = 4_294_967_296",
     "[config].max_round_train_time: expected an integer from 0 to 4294967295"),
    ("verification_percent = 5 ", "verification_percent = 101 ", "verification_percent must be 0..100"),
    ("verification_percent = 5 ", "verification_percent = 256 ",
     "[config].verification_percent: expected an integer from 0 to 255"),
    ("cooldown_time = 60", "cooldown_time = 0", "cooldown_time must be > 0"),
    ("waiting_for_members_extra_time = 5", "waiting_for_members_extra_time = 0", "waiting_for_members_extra_time must be > 0"),
    ("min_clients = 2 ", "min_clients = 0 ", "min_clients must be > 0"),
    ("init_min_clients = 3", "init_min_clients = 1", "min_clients <= init_min_clients <= 256"),
    ("global_batch_size_start = 8", "global_batch_size_start = 0", "0 < global_batch_size_start <= global_batch_size_end"),
    ("global_batch_size_end = 32", "global_batch_size_end = 4", "0 < global_batch_size_start <= global_batch_size_end"),
    ("global_batch_size_start = 8", "global_batch_size_start = 2", "init_min_clients must be <= global_batch_size_start"),
    ("total_steps = 2000", "total_steps = 0", "total_steps must be > 0"),
    ("witness_nodes = 3", "witness_nodes = 0", "witness_nodes must be > 0, <= 32 and <= init_min_clients"),
    ("witness_nodes = 3", "witness_nodes = 2", "witness_nodes must be >= 3 once init_min_clients >= 3"),
    ("min_clients = 2 ", "min_clients = 1 ", "a strict majority of witness_nodes must be <= min_clients"),
    ('join_policy = "Open"', 'join_policy = "Anyone"', "[config].join_policy: must be one of Open, Authorized"),
    ('architecture = "HfLlama"', 'architecture = "Gpt2"', "[model].architecture: must be one of"),
    ("max_seq_len = 512", "max_seq_len = 0", "max_seq_len must be > 0"),
    ('data_location = "kjv"', 'data_location = ""', "data_location must be a non-empty"),
    ('preset = "llama-20m"', 'preset = "' + "p" * 33 + '"', "[model].preset: at most 32 bytes"),
    ('repo = "cohort/llama-20m"', 'repo = ""', "checkpoint.repo must not be empty"),
    ('kind = "Hub"', 'kind = "S3"', "[model.checkpoint].kind: must be one of"),
    ("base_lr = 4e-4", "base_lr = 0.0", "lr_schedule.base_lr must be finite and > 0"),
    ("final_lr = 4e-5", "final_lr = -1.0", "lr_schedule.final_lr must be finite and >= 0"),
    ("base_lr = 4e-4", "base_lr = inf", "[model.lr_schedule].base_lr: must be a finite 32-bit float"),
    ("compression_decay = 0.999", "compression_decay = 1.0", "optimizer.compression_decay must be in [0, 1)"),
    ("clip_grad_norm = 1.0", "clip_grad_norm = -1.0", "optimizer.clip_grad_norm must be >= 0"),
    ("weight_decay = 0.0", "weight_decay = -0.1", "optimizer.weight_decay must be >= 0"),
    ("compression_chunk = 64", "compression_chunk = 0", "optimizer.compression_chunk must be > 0"),
    ("compression_topk = 32", "compression_topk = 0", "optimizer.compression_topk must be in 1..compression_chunk^2"),
    ("quantize_1bit = true", "quantize_1bit = 1", "[model.optimizer].quantize_1bit: expected true or false"),
    ("cold_start_warmup_steps = 0", "cold_start_warmup_steps = 100", "cold_start_warmup_steps must fit in one epoch"),
    ("[model.optimizer]", "[model.optimiser]", "unknown key 'optimiser'"),
    ("max_seq_len = 512\n", "", "[model].max_seq_len: missing"),
    ("[config]", "[configuration]", "unknown section [configuration]"),
    ('name = "KJV Llama 20M"', 'name = "KJV', "not valid TOML"),
]  # fmt: skip


@pytest.mark.parametrize(("old", "new", "message"), MALFORMED, ids=[m[2][:40] for m in MALFORMED])
def test_malformed_config(workspace, helpers, nothing_sent, tmp_path: Path, old, new, message):
    config = helpers.config_copy(tmp_path, "malformed", **{old: new})
    line = helpers.one_error_line(workspace.cli("run", "create", str(config)))
    assert message in line and str(config) in line


def test_missing_config_file(workspace, helpers, nothing_sent, tmp_path: Path):
    line = helpers.one_error_line(workspace.cli("run", "create", str(tmp_path / "none.toml")))
    assert "no run config at" in line


@pytest.mark.parametrize(
    "command", [("run", "status", "no-such-run"), ("run", "pause", "no-such-run"),
                ("run", "close", "no-such-run"), ("run", "watch", "no-such-run")]
)  # fmt: skip
def test_unknown_run_id(workspace, helpers, nothing_sent, command):
    line = helpers.one_error_line(workspace.cli(*command))
    assert "no run 'no-such-run' on this cluster" in line


def test_unreachable_rpc(workspace, helpers, nothing_sent):
    dead = "http://127.0.0.1:9"  # discard port: nothing listens
    program = ("--program-id", str(workspace.program_id))
    for command in (("run", "status", "example-kjv"), ("run", "create", str(helpers.EXAMPLE)),
                    ("wallet", "balance"), ("deploy",)):  # fmt: skip
        line = helpers.one_error_line(workspace.cli(*command, "--cluster", dead, *program))
        assert f"cannot reach the RPC at {dead}" in line


def test_unknown_cluster_and_missing_program_id(workspace, helpers, nothing_sent, tmp_path: Path):
    line = helpers.one_error_line(workspace.cli("run", "list", "--cluster", "moonnet"))
    assert "unknown cluster 'moonnet'" in line and "devnet" in line
    # a cluster that answers but where nothing was deployed: the program id is what is missing
    other = tmp_path / "Anchorfile.toml"
    other.write_text(f'[provider]\ncluster = "other"\nwallet = "id.json"\n\n'
                     f'[clusters]\nother = "{workspace.localnet.net.http_url}"\n')  # fmt: skip
    for command in (("run", "list"), ("train", "--run", "x")):
        line = helpers.one_error_line(
            workspace.cli(*command, env={"COHORT_ANCHORFILE": str(other)})
        )
        assert "no coordinator program id for cluster 'other'" in line and "cohort deploy" in line
    # a cluster that does not answer (a mistyped URL): that is the error, before any program id
    for cluster in ("http://127.0.0.1:9", "http://no-such-host.invalid:8899"):
        for command in (("run", "list"), ("train", "--run", "x")):
            line = helpers.one_error_line(workspace.cli(*command, "--cluster", cluster,
                                                        env={"COHORT_ANCHORFILE": str(other)}))  # fmt: skip
            assert "cannot reach the RPC at" in line and "program id" not in line, line


def test_program_not_deployed_there(workspace, helpers, nothing_sent):
    from solders.keypair import Keypair

    line = helpers.one_error_line(
        workspace.cli("run", "list", "--program-id", str(Keypair().pubkey()))
    )
    assert "no program" in line and "cohort deploy" in line
