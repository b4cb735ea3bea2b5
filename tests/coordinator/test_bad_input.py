"""Bad input on chain: every refusal names its error and leaves the Run's bytes as they were — wrong
signers and accounts, malformed instruction data, witnesses that do not belong, changes at the wrong
time, and one case per validation rule of the config, the model, the progress and the metadata."""

from __future__ import annotations

import hashlib

import pytest
from solders.instruction import AccountMeta, Instruction
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.system_program import CreateAccountParams, create_account
from support.coordinator_chain import (
    begin_warmup,
    elected,
    make_config,
    make_model,
    make_witness,
    open_run,
    play_round,
    start_epoch,
    start_pending_round,
)

CLIENTS = 4
CONFIG = make_config(CLIENTS)  # min_clients 2, witness_nodes 3 (quorum 2), batch 8..16, epoch 300 s
PROGRESS = {"epoch": 0, "step": 1, "epoch_start_data_index": 0}
CLOCK_SYSVAR = Pubkey.from_string("SysvarC1ock11111111111111111111111111111111")


@pytest.fixture
def training(chain):
    """(authority, run, members) in the first RoundTrain of an epoch of four."""
    authority, run = open_run(chain, CONFIG)
    members = [chain.wallet() for _ in range(CLIENTS)]
    start_epoch(chain, run, members, CONFIG)
    return authority, run, members


def replace(ix: Instruction, data: bytes | None = None, **metas: AccountMeta) -> Instruction:
    """The instruction with other data, or other account metas at the given positions (`at_<n>`)."""
    accounts = list(ix.accounts)
    for key, meta in metas.items():
        accounts[int(key.removeprefix("at_"))] = meta
    return Instruction(ix.program_id, ix.data if data is None else data, accounts)


def refused(chain, ix: Instruction, signers, watch: Pubkey) -> str:
    return chain.send_fails([ix], signers, watch).name


def field_offset(idl, type_name: str, *path: str) -> int:
    """Byte offset of a (nested) field inside a struct's Borsh encoding."""
    at = 0
    for name in path:
        for field in idl.types[type_name]["fields"]:
            if field["name"] == name:
                break
            at += idl.size_of(field["type"])
        else:
            raise KeyError(name)
        defined = field["type"].get("defined") if isinstance(field["type"], dict) else None
        type_name = defined["name"] if defined else ""
    return at


def patched(data: bytes, offset: int, value: int) -> bytes:
    return data[:offset] + bytes([value]) + data[offset + 1 :]


# --------------------------------------------------------------------------------------------------
# signers and accounts


def test_wrong_signer(chain, training):
    authority, run, members = training
    stranger = members[0]
    metadata = make_metadata()
    assert chain.fails("update_metadata", stranger, run, {"metadata": metadata}) == "Unauthorized"
    args = {"config": CONFIG, "progress": PROGRESS}
    assert chain.fails("update_config", stranger, run, args) == "Unauthorized"
    assert chain.fails("update_model", stranger, run, {"model": make_model()}) == "Unauthorized"
    assert chain.fails("set_paused", stranger, run, {"paused": True}) == "Unauthorized"
    checkpointers = {"checkpointers": [stranger.pubkey()] * 8}
    assert chain.fails("set_checkpointers", stranger, run, checkpointers) == "Unauthorized"
    index = chain.run_index_address(b"test-run")
    chain.call("set_paused", authority, run, {"paused": True})
    close = {"run_index": index, "recipient": stranger.pubkey()}
    assert chain.fails("close_run", stranger, run, **close) == "Unauthorized"


def test_missing_signature(chain, training):
    authority, run, members = training
    # the authority / user account is named but did not sign (only the fee payer did)
    ix = chain.call_ix("set_paused", authority, run, {"paused": True})
    unsigned = replace(ix, at_0=AccountMeta(authority.pubkey(), False, False))
    assert refused(chain, unsigned, [], run) == "MissingSignature"
    ix = chain.call_ix("tick", members[0], run)
    unsigned = replace(ix, at_0=AccountMeta(members[0].pubkey(), False, False))
    assert refused(chain, unsigned, [], run) == "MissingSignature"
    ix = chain.call_ix("exit_run", members[0], run)
    assert (
        refused(chain, replace(ix, at_0=AccountMeta(members[0].pubkey(), False, False)), [], run)
        == "MissingSignature"
    )


def copy_of_run(
    chain, run: Pubkey, data: bytes | None = None, owner: Pubkey | None = None
) -> Pubkey:
    address = Keypair().pubkey()
    chain.put_account(address, chain.run_bytes(run) if data is None else data, owner)
    return address


@pytest.mark.parametrize("name", ["tick", "exit_run", "update_metadata"])
def test_wrong_run_account(chain, training, name):
    authority, run, members = training
    signer = authority if name == "update_metadata" else members[0]
    args = {"metadata": make_metadata()} if name == "update_metadata" else None
    data = chain.run_bytes(run)
    other_program = Keypair().pubkey()
    run_index = chain.idl.accounts["RunIndex"]
    version_at = 8
    cases = [
        (copy_of_run(chain, run, owner=other_program), "WrongAccountOwner"),
        (copy_of_run(chain, run, owner=Pubkey.default()), "WrongAccountOwner"),
        (copy_of_run(chain, run, data[:-1]), "WrongAccountSize"),
        (copy_of_run(chain, run, data + b"\0"), "WrongAccountSize"),
        (chain.run_index_address(b"test-run"), "WrongAccountSize"),
        (copy_of_run(chain, run, run_index + data[8:]), "WrongDiscriminator"),
        (copy_of_run(chain, run, bytes(8) + data[8:]), "WrongDiscriminator"),
        (
            copy_of_run(chain, run, patched(data, version_at, 1)),
            "WrongVersion",
        ),  # the earlier layout
    ]
    for address, error in cases:
        assert chain.fails(name, signer, address, args) == error, error
    assert chain.run_bytes(run) == data


def test_run_account_not_writable(chain, training):
    authority, run, members = training
    ix = chain.call_ix("tick", members[0], run)
    read_only = replace(ix, at_1=AccountMeta(run, False, False))
    assert refused(chain, read_only, [members[0]], run) == "AccountNotWritable"
    ix = chain.call_ix("update_metadata", authority, run, {"metadata": make_metadata()})
    read_only = replace(ix, at_1=AccountMeta(run, False, False))
    assert refused(chain, read_only, [authority], run) == "AccountNotWritable"


@pytest.mark.parametrize(
    "name",
    [
        "tick",
        "exit_run",
        "join_run",
        "witness",
        "set_paused",
        "vote_weights",
        "report_equivocation",
        "report_check",
    ],
)
def test_wrong_slot_hashes_account(chain, core, training, name):
    authority, run, members = training
    state = chain.state(run)
    signer, args, extra = members[0], None, {}
    if name == "join_run":
        args, extra = (
            {"p2p_identity": members[0].pubkey(), "endpoint": b"", "throughput": 0},
            {"authorization": run},
        )
    elif name == "witness":
        index, position = next(iter(elected(chain, core, run).items()))
        signer, args = members[index], make_witness(index, position, state["progress"]["step"])
    elif name == "set_paused":
        signer, args = authority, {"paused": True}
    elif name in ("vote_weights", "report_equivocation", "report_check"):
        args = sample_args(chain, name, signer)
    for impostor in (CLOCK_SYSVAR, run, Keypair().pubkey()):
        assert chain.fails(name, signer, run, args, slot_hashes=impostor, **extra) == "WrongSysvar"


def test_missing_accounts(chain, training):
    authority, run, members = training
    ix = chain.call_ix("tick", members[0], run)
    short = Instruction(ix.program_id, ix.data, list(ix.accounts)[:2])
    assert refused(chain, short, [members[0]], run) == "MissingAccounts"
    ix = chain.call_ix("set_paused", authority, run, {"paused": True})
    short = Instruction(ix.program_id, ix.data, list(ix.accounts)[:2])
    assert refused(chain, short, [authority], run) == "MissingAccounts"


# --------------------------------------------------------------------------------------------------
# instruction data


def sample_args(chain, name: str, signer: Keypair) -> dict | None:
    """Well-formed arguments for every instruction (their content does not matter here)."""
    if not chain.idl.instructions[name]["args"]:
        return None
    samples = {
        "initialize_run": {"run_id": b"x", "join_authority": signer.pubkey()},
        "update_metadata": {"metadata": make_metadata()},
        "update_config": {"config": CONFIG, "progress": PROGRESS},
        "update_model": {"model": make_model()},
        "set_checkpointers": {"checkpointers": [signer.pubkey()] * 8},
        "set_paused": {"paused": True},
        "set_join_authorization": {"grantee": signer.pubkey(), "allowed": True},
        "join_run": {"p2p_identity": signer.pubkey(), "endpoint": b"", "throughput": 0},
        "warmup_witness": {"index": 0},
        "witness": make_witness(0, 0, 1),
        "health_check": {"step": 1, "count": 1, "indices": [0] * 32},
        "checkpoint": {"checkpoint": make_model()["checkpoint"]},
        "vote_weights": {"index": 0, "step": 1, "manifest": bytes(range(32))},
        "settle_points": {"wallet": signer.pubkey()},
        "report_equivocation": {"index": 0, "step": 1, "first": STATEMENT, "second": STATEMENT},
        "report_check": {"step": 1, "trainer": 0, "reason": "PayloadMismatch"},
    }
    return samples[name]


def all_accounts(chain, name: str, signer: Keypair, run: Pubkey) -> dict[str, Pubkey]:
    keys = {}
    for account in chain.idl.instructions[name]["accounts"]:
        if "address" not in account:
            keys[account["name"]] = run if account["name"] == "run" else signer.pubkey()
    return keys


STATEMENT = {"batch_start": 0, "batch_end": 8, "commitment": bytes(32)}
INSTRUCTIONS = [
    "initialize_run", "update_metadata", "update_config", "update_model", "set_checkpointers",
    "set_paused", "set_join_authorization", "join_run", "exit_run", "claim_points", "settle_points",
    "close_points", "close_endpoint", "close_join_authorization", "tick", "warmup_witness", "witness", "health_check",
    "checkpoint", "vote_weights", "report_equivocation", "report_check", "close_run",
]  # fmt: skip


@pytest.mark.parametrize("name", INSTRUCTIONS)
def test_truncated_oversized_and_garbage_data(chain, training, name):
    authority, run, _members = training
    ix = chain.ix(
        name, all_accounts(chain, name, authority, run), sample_args(chain, name, authority)
    )
    data = bytes(ix.data)
    variants = [data + b"\0", data + bytes(64)]
    if len(data) > 8:
        variants += [data[:-1], data[:8], data[: 8 + (len(data) - 8) // 2]]
    garbage = hashlib.sha256(name.encode()).digest() * 64
    variants += [data[:8] + garbage[: len(data) - 8 + 3]]
    for bad in variants:
        assert refused(chain, replace(ix, bad), [authority], run) == "InvalidInstructionData", len(
            bad
        )


def test_unknown_instruction(chain, training):
    _authority, run, members = training
    ix = chain.call_ix("tick", members[0], run)
    unknown = hashlib.sha256(b"global:withdraw_everything").digest()[:8]
    account_discriminator = chain.idl.accounts["Run"]
    for data in (unknown, unknown + bytes(100), account_discriminator, b"", b"\x01", bytes(7)):
        assert refused(chain, replace(ix, data), [members[0]], run) == "InvalidInstruction", data


def test_bools_must_be_zero_or_one(chain, training):
    authority, run, _members = training
    ix = chain.call_ix("set_paused", authority, run, {"paused": True})
    assert (
        refused(chain, replace(ix, patched(bytes(ix.data), 8, 2)), [authority], run)
        == "InvalidInstructionData"
    )
    accounts = {"join_authority": authority.pubkey(), "run": run,
                "authorization": chain.join_authorization_address(run, authority.pubkey())}  # fmt: skip
    ix = chain.ix(
        "set_join_authorization", accounts, {"grantee": authority.pubkey(), "allowed": True}
    )
    bad = patched(bytes(ix.data), len(ix.data) - 1, 2)
    assert refused(chain, replace(ix, bad), [authority], run) == "InvalidInstructionData"


# --------------------------------------------------------------------------------------------------
# witnesses


def test_witness_refusals(chain, core, training):
    _authority, run, members = training
    step = chain.state(run)["progress"]["step"]
    chosen = elected(chain, core, run)
    assert len(chosen) == CONFIG["witness_nodes"]
    index, position = next(iter(chosen.items()))
    other = next(i for i in range(CLIENTS) if i not in chosen)
    round_ = core.round_bytes(chain.run_bytes(run)[8:])
    other_position = core.witness_position(round_, other)
    stranger = chain.wallet()

    def fails(signer, args):
        return chain.fails("witness", signer, run, args)

    # not seated: its true position is past the seats, and it cannot claim another one
    assert fails(members[other], make_witness(other, other_position, step)) == "InvalidWitness"
    assert fails(members[other], make_witness(other, position, step)) == "InvalidWitness"
    # seated, but a wrong position, or someone else's index
    assert fails(members[index], make_witness(index, position ^ 1, step)) == "InvalidWitness"
    assert fails(members[other], make_witness(index, position, step)) == "InvalidWitness"
    assert fails(stranger, make_witness(index, position, step)) == "InvalidWitness"
    for out_of_range in (CLIENTS, 255, 65535):
        assert fails(members[index], make_witness(out_of_range, position, step)) == "InvalidWitness"
    # another step
    for wrong in (step - 1, step + 1, 0, 2**32 - 1):
        assert fails(members[index], make_witness(index, position, wrong)) == "WrongStep"
    # the real one, then the same record again (other metadata is not another record)
    witness = make_witness(index, position, step)
    chain.call("witness", members[index], run, witness)
    assert fails(members[index], witness) == "DuplicateWitness"
    again = witness | {"metadata": witness["metadata"] | {"loss": 1.0}}
    assert fails(members[index], again) == "DuplicateWitness"


def test_witness_and_warmup_witness_in_the_wrong_phase_or_for_another_member(chain):
    _authority, run = open_run(chain, CONFIG)
    members = [chain.wallet() for _ in range(CLIENTS)]
    witness = make_witness(0, 0, 1)
    # WaitingForMembers
    assert chain.fails("witness", members[0], run, witness) == "InvalidRunState"
    assert chain.fails("warmup_witness", members[0], run, {"index": 0}) == "InvalidRunState"
    begin_warmup(chain, run, members, CONFIG)
    assert chain.fails("witness", members[0], run, witness) == "InvalidRunState"
    for index in (1, CLIENTS, 65535):
        assert chain.fails("warmup_witness", members[0], run, {"index": index}) == "InvalidWitness"
    assert chain.fails("warmup_witness", chain.wallet(), run, {"index": 0}) == "InvalidWitness"
    chain.call("warmup_witness", members[0], run, {"index": 0})
    assert chain.fails("warmup_witness", members[0], run, {"index": 0}) == "DuplicateWitness"
    chain.call("warmup_witness", members[1], run, {"index": 1})
    chain.call(
        "warmup_witness", members[2], run, {"index": 2}
    )  # witness_nodes of them: inputs freeze
    assert chain.fails("warmup_witness", members[3], run, {"index": 3}) == "SeedPending"
    start_pending_round(chain, run, members[0])
    assert chain.state(run)["run_state"] == "RoundTrain"
    assert chain.fails("warmup_witness", members[3], run, {"index": 3}) == "InvalidRunState"


# --------------------------------------------------------------------------------------------------
# the wrong time


def test_config_and_model_change_while_running(chain, core, training):
    authority, run, members = training
    args = {"config": CONFIG, "progress": PROGRESS}
    assert chain.fails("update_config", authority, run, args) == "NotHalted"
    assert chain.fails("update_model", authority, run, {"model": make_model()}) == "NotHalted"
    chain.call("set_paused", authority, run, {"paused": True})
    play_round(chain, core, run, members)
    assert chain.state(run)["run_state"] == "Cooldown"
    assert chain.fails("update_config", authority, run, args) == "NotHalted"
    assert chain.fails("update_model", authority, run, {"model": make_model()}) == "NotHalted"
    chain.advance(CONFIG["cooldown_time"])
    chain.call("tick", members[0], run)
    # Paused: allowed again, only without moving the epoch number back (result statements name it)
    assert chain.fails("update_config", authority, run, args) == "ProgressInvalid"
    epoch = chain.state(run)["progress"]["epoch"]
    chain.call("update_config", authority, run, {**args, "progress": {**PROGRESS, "epoch": epoch}})


def test_close_while_running(chain, training):
    authority, run, _members = training
    accounts = {"run_index": chain.run_index_address(b"test-run"), "recipient": authority.pubkey()}
    assert chain.fails("close_run", authority, run, **accounts) == "NotHalted"


def test_nothing_to_tick_and_halted(chain):
    authority = chain.wallet()
    run = chain.create_run(authority)
    assert chain.fails("tick", authority, run) == "Halted"
    assert chain.join_fails(authority, run) == "Halted"
    chain.open_run(authority, run, CONFIG)
    assert chain.fails("tick", authority, run) == "NothingToTick"


# --------------------------------------------------------------------------------------------------
# initialize_run


def test_initialize_run_refusals(chain):
    authority = chain.wallet()
    size = chain.idl.account_size("Run")

    def attempt(run_id: bytes, space: int = size, owner: Pubkey | None = None, index: Pubkey | None = None,
                account: Keypair | None = None) -> str:  # fmt: skip
        account = account or Keypair()
        lamports = chain.svm.minimum_balance_for_rent_exemption(space)
        params = CreateAccountParams(from_pubkey=chain.payer.pubkey(), to_pubkey=account.pubkey(), lamports=lamports,
                                     space=space, owner=owner or chain.program_id)  # fmt: skip
        index = index or chain.run_index_address(run_id.rstrip(b"\0") or b"x")
        accounts = {"payer": chain.payer.pubkey(), "authority": authority.pubkey(), "run": account.pubkey(),
                    "run_index": index}  # fmt: skip
        args = {"run_id": run_id, "join_authority": authority.pubkey()}
        ixs = [create_account(params), chain.ix("initialize_run", accounts, args)]
        return chain.send_fails(ixs, [account, authority], account.pubkey()).name

    assert attempt(b"") == "RunIdInvalid"
    assert attempt(b"a\0b") == "RunIdInvalid"
    assert attempt(b"fine", space=size - 1) == "WrongAccountSize"
    assert attempt(b"fine", owner=Keypair().pubkey()) == "WrongAccountOwner"
    assert attempt(b"fine", index=chain.run_index_address(b"other")) == "WrongPda"
    itself = Keypair()
    assert attempt(b"fine", index=itself.pubkey(), account=itself) == "DuplicateAccount"
    run = chain.create_run(authority, run_id=b"taken")
    assert attempt(b"taken") == "AlreadyInitialized"  # the run id's index exists
    # the run account itself was initialized already
    args = {"run_id": b"again", "join_authority": authority.pubkey()}
    accounts = {"payer": chain.payer.pubkey(), "authority": authority.pubkey(), "run": run,
                "run_index": chain.run_index_address(b"again")}  # fmt: skip
    ix = chain.ix("initialize_run", accounts, args)
    assert chain.send_fails([ix], [authority], run).name == "AlreadyInitialized"


# --------------------------------------------------------------------------------------------------
# validation rules: one case per rule, with the rule's text in the program log


def make_metadata(**overrides) -> dict:
    metadata = {"name": b"run", "description": b"", "client_version": b"0.1.0", "num_parameters": 0,
                "vocab_size": 0}  # fmt: skip
    return metadata | overrides


BIG = {
    "min_clients": 40,
    "init_min_clients": 40,
    "global_batch_size_start": 40,
    "global_batch_size_end": 80,
}
SEATS = "witness_nodes must be > 0, <= 32 and <= init_min_clients (every seat filled at the start)"
CONFIG_RULES = [
    ({"epoch_time": 0}, "epoch_time must be > 0"),
    ({"warmup_time": 300}, "warmup_time must be < epoch_time"),
    ({"max_round_train_time": 0}, "max_round_train_time must be > 0 and < epoch_time"),
    ({"max_round_train_time": 300}, "max_round_train_time must be > 0 and < epoch_time"),
    ({"round_witness_time": 0}, "round_witness_time must be > 0 and < epoch_time"),
    ({"round_witness_time": 300}, "round_witness_time must be > 0 and < epoch_time"),
    ({"cooldown_time": 0}, "cooldown_time must be > 0"),
    ({"waiting_for_members_extra_time": 0}, "waiting_for_members_extra_time must be > 0"),
    ({"min_clients": 0}, "min_clients must be > 0"),
    ({"min_clients": 5}, "min_clients <= init_min_clients <= 256 must hold"),
    ({"init_min_clients": 257, "global_batch_size_start": 300, "global_batch_size_end": 300},
     "min_clients <= init_min_clients <= 256 must hold"),
    ({"global_batch_size_start": 0}, "0 < global_batch_size_start <= global_batch_size_end must hold"),
    ({"global_batch_size_start": 17}, "0 < global_batch_size_start <= global_batch_size_end must hold"),
    ({"global_batch_size_start": 3},
     "init_min_clients must be <= global_batch_size_start (every trainer needs data)"),
    ({"total_steps": 0}, "total_steps must be > 0"),
    ({"witness_nodes": 0}, SEATS),
    ({"witness_nodes": 5}, SEATS),
    (BIG | {"witness_nodes": 33}, SEATS),
    ({"witness_nodes": 4}, "a strict majority of witness_nodes must be <= min_clients (else no step can be decided)"),
    ({"witness_nodes": 2},
     "witness_nodes must be >= 3 once init_min_clients >= 3 (with 2 seats one witness can block every step)"),
    ({"join_policy": 2}, "join_policy is not a known policy"),
    ({"max_share_ratio": 0}, "max_share_ratio must be 1..16"),
    ({"verification_percent": 101}, "verification_percent must be 0..100"),
    ({"verification_percent": 255}, "verification_percent must be 0..100"),
    ({"pipeline_depth": 1}, "pipeline_depth must be 2..4"),
    ({"pipeline_depth": 5}, "pipeline_depth must be 2..4"),
    ({"conviction_ban_epochs": 0}, "conviction_ban_epochs must be 1..MAX_BAN_EPOCHS (10000)"),
    ({"conviction_ban_epochs": 10_001}, "conviction_ban_epochs must be 1..MAX_BAN_EPOCHS (10000)"),
    ({"check_rate_kib": 15}, "check_rate_kib must be 16..65535 (KiB/s)"),
]  # fmt: skip


def sent_with_raw_enums(
    chain, ix: Instruction, type_name: str, value: dict, base: int
) -> Instruction:
    """Enum fields given as out-of-range ints are written as raw bytes (the coder refuses them)."""
    data = bytes(ix.data)
    for name, raw in raw_enum_fields(value):
        data = patched(data, base + field_offset(chain.idl, type_name, *name), raw)
    return replace(ix, data)


def raw_enum_fields(value: dict, prefix: tuple = ()) -> list[tuple[tuple, int]]:
    out = []
    for key, v in value.items():
        if isinstance(v, dict):
            out += raw_enum_fields(v, (*prefix, key))
        elif isinstance(v, RawByte):
            out.append(((*prefix, key), int(v)))
    return out


class RawByte(int):
    """A value for a one-byte field (enum or bool) that the IDL coder would refuse; `placeholder` is
    what the coder encodes before the byte is patched."""

    placeholder: object = 0


def raw_bool(value: int) -> RawByte:
    byte = RawByte(value)
    byte.placeholder = False
    return byte


def with_raw(value: dict) -> tuple[dict, dict]:
    """(the value with raw bytes replaced by their placeholders, the value itself)."""

    def clean(v):
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        if isinstance(v, RawByte):
            return v.placeholder
        return v

    return clean(value), value


@pytest.fixture
def unopened(chain):
    """An authority and an Uninitialized run (halted: config and model may change)."""
    authority = chain.wallet()
    run = chain.create_run(authority)
    chain.call("update_model", authority, run, {"model": make_model()})
    return authority, run


@pytest.mark.parametrize(("overrides", "rule"), CONFIG_RULES)
def test_invalid_config(chain, unopened, overrides, rule):
    authority, run = unopened
    overrides = {k: RawByte(v) if k == "join_policy" else v for k, v in overrides.items()}
    encodable, raw = with_raw(make_config(CLIENTS, **overrides))
    ix = chain.call_ix("update_config", authority, run, {"config": encodable, "progress": PROGRESS})
    ix = sent_with_raw_enums(chain, ix, "RunConfig", raw, 8)
    failure = chain.send_fails([ix], [authority], run)
    assert failure.name == "ConfigInvalid"
    assert f"Program log: {rule}" in failure.logs


F32_NAN, F32_INF = float("nan"), float("inf")
MODEL_RULES = [
    ({"architecture": RawByte(3)}, "architecture is not known"),
    ({"data_type": RawByte(2)}, "data_type is not known"),
    ({"max_seq_len": 0}, "max_seq_len must be > 0"),
    ({"preset": b"llama\0x"}, "preset must be NUL-padded"),
    ({"data_location": b""}, "data_location must be a non-empty NUL-padded string"),
    ({"data_location": b"kjv\0x"}, "data_location must be a non-empty NUL-padded string"),
    ({"checkpoint": {"kind": RawByte(5)}}, "checkpoint.kind is not known"),
    ({"checkpoint": {"repo": b"a\0b"}}, "checkpoint.repo must be NUL-padded"),
    ({"checkpoint": {"repo": b""}}, "checkpoint.repo must not be empty"),
    ({"checkpoint": {"revision": b"main\0x"}}, "checkpoint.revision must be NUL-padded"),
    ({"lr_schedule": {"kind": RawByte(4)}}, "lr_schedule.kind is not known"),
    ({"lr_schedule": {"base_lr": 0.0}}, "lr_schedule.base_lr must be finite and > 0"),
    ({"lr_schedule": {"base_lr": -1e-4}}, "lr_schedule.base_lr must be finite and > 0"),
    ({"lr_schedule": {"base_lr": F32_INF}}, "lr_schedule.base_lr must be finite and > 0"),
    ({"lr_schedule": {"base_lr": F32_NAN}}, "lr_schedule.base_lr must be finite and > 0"),
    ({"lr_schedule": {"final_lr": -0.5}}, "lr_schedule.final_lr must be finite and >= 0"),
    ({"lr_schedule": {"final_lr": F32_NAN}}, "lr_schedule.final_lr must be finite and >= 0"),
    ({"optimizer": {"compression_decay": 1.0}}, "optimizer.compression_decay must be in [0, 1)"),
    ({"optimizer": {"compression_decay": -0.1}}, "optimizer.compression_decay must be in [0, 1)"),
    ({"optimizer": {"compression_decay": F32_NAN}}, "optimizer.compression_decay must be in [0, 1)"),
    ({"optimizer": {"clip_grad_norm": -1.0}}, "optimizer.clip_grad_norm must be >= 0"),
    ({"optimizer": {"weight_decay": F32_INF}}, "optimizer.weight_decay must be >= 0"),
    ({"optimizer": {"compression_chunk": 0}}, "optimizer.compression_chunk must be > 0"),
    ({"optimizer": {"compression_topk": 0}}, "optimizer.compression_topk must be in 1..compression_chunk^2"),
    ({"optimizer": {"compression_topk": 4097}}, "optimizer.compression_topk must be in 1..compression_chunk^2"),
    ({"optimizer": {"quantize_1bit": raw_bool(2)}}, "optimizer.quantize_1bit must be a bool"),
    ({"cold_start_warmup_steps": 15},
     "cold_start_warmup_steps must fit in one epoch: <= (epoch_time - warmup_time) / max_round_train_time"),
]  # fmt: skip


def deep_update(base: dict, overrides: dict) -> dict:
    out = dict(base)
    for key, value in overrides.items():
        out[key] = deep_update(base[key], value) if isinstance(value, dict) else value
    return out


@pytest.mark.parametrize(("overrides", "rule"), MODEL_RULES)
def test_invalid_model(chain, unopened, overrides, rule):
    authority, run = unopened
    progress = PROGRESS
    chain.call("update_config", authority, run, {"config": CONFIG, "progress": progress})
    encodable, raw = with_raw(deep_update(make_model(), overrides))
    ix = chain.call_ix("update_model", authority, run, {"model": encodable})
    ix = sent_with_raw_enums(chain, ix, "ModelConfig", raw, 8)
    failure = chain.send_fails([ix], [authority], run)
    assert failure.name == "ModelInvalid"
    assert f"Program log: {rule}" in failure.logs


def test_config_that_the_model_no_longer_fits(chain, unopened):
    """The cold-start window must fit in one epoch, checked from either side."""
    authority, run = unopened
    chain.call("update_config", authority, run, {"config": CONFIG, "progress": PROGRESS})
    chain.call("update_model", authority, run, {"model": make_model(cold_start_warmup_steps=14)})
    shorter = make_config(CLIENTS, max_round_train_time=30)  # (300 - 10) // 30 = 9 < 14
    failure = chain.failure(
        "update_config", authority, run, {"config": shorter, "progress": PROGRESS}
    )
    assert failure.name == "ModelInvalid"
    assert any("cold_start_warmup_steps must fit in one epoch" in line for line in failure.logs)


def test_invalid_progress(chain, unopened):
    authority, run = unopened
    progress = PROGRESS | {"step": 0}
    failure = chain.failure(
        "update_config", authority, run, {"config": CONFIG, "progress": progress}
    )
    assert failure.name == "ProgressInvalid"
    assert "Program log: progress.step must be > 0" in failure.logs


@pytest.mark.parametrize("field", ["name", "description", "client_version"])
def test_invalid_metadata(chain, unopened, field):
    authority, run = unopened
    failure = chain.failure(
        "update_metadata", authority, run, {"metadata": make_metadata(**{field: b"a\0b"})}
    )
    assert failure.name == "MetadataInvalid"
    assert f"Program log: {field} must be NUL-padded" in failure.logs
