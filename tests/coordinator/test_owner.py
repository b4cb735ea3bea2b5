"""The authority's side on chain: designated checkpointers and how the checkpoint pointer moves (kind
transitions; its step and weights hash are the finishers' vote, not theirs), metadata at any time, and
close_run's refund (only while halted)."""

from __future__ import annotations

import pytest
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.system_program import TransferParams, transfer
from support.coordinator_chain import make_config, make_model, open_run, start_epoch

WEIGHTS = bytes(range(32))
KEPT = {"step": 0, "weights_sha256": bytes(32)}  # the pointer's step and hash before (make_model's)


def checkpoint(kind: str, repo: bytes = b"cohort/llama-20m-step5", **fields) -> dict:
    value = {"kind": kind, "step": 5, "repo": repo, "revision": b"main", "weights_sha256": WEIGHTS}
    return {"checkpoint": value | fields}


def stored(chain, type_name: str, value: dict) -> dict:
    """A value as it reads back from the account (byte strings NUL-padded to their fields)."""
    type_ = {"defined": {"name": type_name}}
    return chain.idl.decode(type_, chain.idl.encode(type_, value))[0]


def designate(chain, authority, run, *keys: Pubkey):
    keys_ = [*keys, *[Pubkey.default()] * (8 - len(keys))]
    return chain.call("set_checkpointers", authority, run, {"checkpointers": keys_})


def test_checkpoint_by_designated_vs_undesignated_signer(chain):
    config = make_config(2)
    authority, run = open_run(chain, config)
    members = [chain.wallet() for _ in range(2)]
    start_epoch(chain, run, members, config)
    keeper = chain.wallet()
    for signer in (members[0], keeper, authority):  # a member, a stranger, the authority itself
        assert chain.fails("checkpoint", signer, run, checkpoint("Hub")) == "NotACheckpointer"

    meta = designate(chain, authority, run, keeper.pubkey())
    assert chain.idl.events_in_logs(list(meta.logs()), chain.program_id) == [
        ("RunUpdated", {"run": run, "what": 4})
    ]
    assert chain.state(run)["checkpointers"][0] == keeper.pubkey()
    before = chain.state(run)
    meta = chain.call("checkpoint", keeper, run, checkpoint("Hub"))
    after = chain.state(run)
    # the repo moved; the step and weights hash it sent are ignored: only vote_weights sets those
    assert after["model"]["checkpoint"] == stored(
        chain, "Checkpoint", checkpoint("Hub", **KEPT)["checkpoint"]
    )
    assert chain.idl.events_in_logs(list(meta.logs()), chain.program_id) == [
        ("CheckpointUpdated", {"run": run, "checkpoint": after["model"]["checkpoint"]})
    ]
    # nothing else moved
    before["model"]["checkpoint"], before["nonce"] = (
        after["model"]["checkpoint"],
        before["nonce"] + 1,
    )
    assert after == before

    # designations can be withdrawn; only the authority designates
    designate(chain, authority, run)
    assert chain.fails("checkpoint", keeper, run, checkpoint("Hub")) == "NotACheckpointer"
    args = {"checkpointers": [keeper.pubkey()] * 8}
    assert chain.fails("set_checkpointers", keeper, run, args) == "Unauthorized"


@pytest.mark.parametrize(
    ("current", "sent", "kind"),
    [
        ("Hub", "Hub", "Hub"),
        ("Gcs", "Gcs", "Gcs"),
        ("Hub", "Gcs", "Gcs"),
        ("Dummy", "Hub", "Hub"),
        ("P2P", "Hub", "P2P"),  # peers keep serving; the repo is the new fallback
        ("P2P", "Gcs", "P2PGcs"),
        ("P2PGcs", "Gcs", "P2PGcs"),
        ("P2PGcs", "Hub", "P2P"),
    ],
)
def test_checkpoint_kind_transitions(chain, current, sent, kind):
    authority = chain.wallet()
    run = chain.create_run(authority)
    start = {
        "kind": current,
        "step": 0,
        "repo": b"old/repo",
        "revision": b"",
        "weights_sha256": bytes(32),
    }
    chain.call("update_model", authority, run, {"model": make_model(checkpoint=start)})
    keeper = chain.wallet()
    designate(chain, authority, run, keeper.pubkey())
    chain.call("checkpoint", keeper, run, checkpoint(sent, b"new/repo"))
    expected = stored(chain, "Checkpoint", checkpoint(kind, b"new/repo", **KEPT)["checkpoint"])
    assert chain.state(run)["model"]["checkpoint"] == expected


@pytest.mark.parametrize(
    "bad",
    [
        checkpoint("P2P"),  # only where the weights are: Hub or Gcs
        checkpoint("P2PGcs"),
        checkpoint("Dummy"),
        checkpoint("Hub", b""),
        checkpoint("Hub", b"a\0b"),
        checkpoint("Hub", revision=b"x\0y"),
    ],
)
def test_invalid_checkpoint_is_refused(chain, bad):
    authority = chain.wallet()
    run = chain.create_run(authority)
    chain.call("update_model", authority, run, {"model": make_model()})
    keeper = chain.wallet()
    designate(chain, authority, run, keeper.pubkey())
    assert chain.fails("checkpoint", keeper, run, bad) == "InvalidCheckpoint"


def test_metadata_changes_at_any_time(chain):
    config = make_config(2)
    authority, run = open_run(chain, config)
    start_epoch(chain, run, [chain.wallet() for _ in range(2)], config)
    metadata = {"name": b"kjv-20m", "description": b"a small llama on the King James Bible",
                "client_version": b"0.1.0", "num_parameters": 20_000_000, "vocab_size": 32_000}  # fmt: skip
    meta = chain.call("update_metadata", authority, run, {"metadata": metadata})
    assert chain.idl.events_in_logs(list(meta.logs()), chain.program_id) == [
        ("RunUpdated", {"run": run, "what": 1})
    ]
    state = chain.state(run)
    assert state["metadata"] == stored(chain, "RunMetadata", metadata)
    assert state["run_state"] == "RoundTrain"


def close_accounts(chain, run: Pubkey, recipient: Pubkey, run_id: bytes = b"test-run") -> dict:
    return {"run_index": chain.run_index_address(run_id), "recipient": recipient}


def test_close_run_refunds_both_accounts_only_while_halted(chain):
    authority, run = open_run(chain, make_config(2))
    index = chain.run_index_address(b"test-run")
    recipient = Keypair().pubkey()
    accounts = close_accounts(chain, run, recipient)
    assert chain.fails("close_run", authority, run, **accounts) == "NotHalted"
    assert chain.fails("close_run", chain.wallet(), run, **accounts) == "Unauthorized"
    chain.call("set_paused", authority, run, {"paused": True})
    rent = chain.svm.get_balance(run) + chain.svm.get_balance(index)
    chain.call("close_run", authority, run, **accounts)
    assert chain.svm.get_balance(recipient) == rent
    assert chain.account_bytes(run) is None and chain.account_bytes(index) is None
    # the run id is free again
    chain.create_run(authority)


def test_close_run_checks_its_accounts(chain):
    authority = chain.wallet()
    run = chain.create_run(authority)
    other = chain.create_run(authority, run_id=b"other")
    recipient = Keypair().pubkey()
    wrong_index = close_accounts(chain, run, recipient, b"other")
    assert chain.fails("close_run", authority, run, **wrong_index) == "WrongPda"
    assert (
        chain.fails("close_run", authority, run, **close_accounts(chain, run, run))
        == "DuplicateAccount"
    )
    index = chain.run_index_address(b"test-run")
    assert (
        chain.fails("close_run", authority, run, **close_accounts(chain, run, index))
        == "DuplicateAccount"
    )
    # an uninitialized run closes (a mistaken creation is refunded)
    chain.call("close_run", authority, run, **close_accounts(chain, run, recipient))
    assert chain.account_bytes(run) is None and chain.account_bytes(other) is not None


def test_lamports_sent_to_a_run_index_address_do_not_block_the_run_id(chain):
    """Anyone can send lamports to the PDA of a run id before it is used (here more than its rent)."""
    mallory = chain.wallet()
    index = chain.run_index_address(b"test-run")
    gift = transfer(TransferParams(from_pubkey=mallory.pubkey(), to_pubkey=index, lamports=10**8))
    chain.send([gift], [mallory])
    authority = chain.wallet()
    run = chain.create_run(authority)
    run_index = chain.idl.decode_account("RunIndex", chain.account_bytes(index))
    assert run_index["run"] == run and run_index["authority"] == authority.pubkey()
    assert chain.svm.get_account(index).owner == chain.program_id
