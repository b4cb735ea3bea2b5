"""Unit tests of the pure parts: which log lines count as the coordinator's events, what a transaction
decodes to, JSON conversion of decoded values, which strings may become links, and how replaced witness
records are stored."""

from __future__ import annotations

import base64
import hashlib
import json
import struct

from solders.hash import Hash
from solders.instruction import AccountMeta, Instruction
from solders.keypair import Keypair
from solders.message import Message
from solders.pubkey import Pubkey
from solders.transaction import Transaction
from support.event_forger import event_bytes

from cohort.sdk.coordinator_core import load_idl
from cohort.sdk.explorer.decode import (
    DecodedEvent,
    DecodedTransaction,
    decode_transaction,
    jsonable,
)
from cohort.sdk.explorer.links import checkpoint_url, cluster_query, safe_http_url
from cohort.sdk.explorer.store import Store
from cohort.sdk.models import CheckFailed, CheckFailure

IDL = load_idl()
PROGRAM = str(Pubkey.new_unique())
OTHER = str(Pubkey.new_unique())


def run_updated(run: Pubkey, what: int = 1) -> str:
    payload = (
        hashlib.sha256(b"event:RunUpdated").digest()[:8] + bytes(run) + struct.pack("<B", what)
    )
    fields = {f["name"] for f in IDL.types["RunUpdated"]["fields"]}
    assert fields >= {"run", "what"}
    payload += bytes(IDL.size_of({"defined": {"name": "RunUpdated"}}) + 8 - len(payload))
    return "Program data: " + base64.b64encode(payload).decode()


def test_only_the_programs_own_data_lines_are_events():
    run = Pubkey.new_unique()
    logs = [
        f"Program {PROGRAM} invoke [1]",
        run_updated(run, 1),
        f"Program {OTHER} invoke [2]",
        run_updated(run, 2),  # a program we call logs bytes that look like our event: not ours
        f"Program {OTHER} success",
        run_updated(run, 3),
        "Program data: !!!not base64",
        "Program data: " + base64.b64encode(b"short").decode(),
        f"Program {PROGRAM} consumed 1000 of 200000 compute units",
        f"Program {PROGRAM} success",
        f"Program {OTHER} invoke [1]",
        run_updated(run, 4),  # another top-level program
        f"Program {OTHER} success",
    ]
    events = IDL.events_in_logs(logs, PROGRAM)
    assert [(name, value["what"]) for name, value in events] == [
        ("RunUpdated", 1),
        ("RunUpdated", 3),
    ]


def _get_transaction_result(err: object, logs: list[str], run: Pubkey, name: str = "tick",
                            args: dict | None = None) -> tuple[str, dict]:  # fmt: skip
    payer = Keypair()
    ix = IDL.instruction(name, {"user": payer.pubkey(), "run": run}, args or {},
                         program_id=Pubkey.from_string(PROGRAM))  # fmt: skip
    extra = Instruction(Pubkey.from_string(OTHER), b"\x01", [AccountMeta(run, False, True)])
    blockhash = Hash.new_unique()
    tx = Transaction(
        [payer], Message.new_with_blockhash([ix, extra], payer.pubkey(), blockhash), blockhash
    )
    result = {"slot": 42, "blockTime": 1_700_000_000,
              "transaction": [base64.b64encode(bytes(tx)).decode(), "base64"],
              "meta": {"err": err, "logMessages": logs}}  # fmt: skip
    return str(tx.signatures[0]), result


def test_a_transaction_decodes_to_instruction_names_runs_and_events():
    run = Pubkey.new_unique()
    logs = [f"Program {PROGRAM} invoke [1]", run_updated(run), f"Program {PROGRAM} success"]
    signature, result = _get_transaction_result(None, logs, run)
    tx = decode_transaction(IDL, PROGRAM, signature, result)
    assert (tx.slot, tx.block_time, tx.err) == (42, 1_700_000_000, None)
    assert [(i.name, i.run) for i in tx.instructions] == [("tick", str(run))]
    assert [(e.ordinal, e.name, e.run) for e in tx.events] == [(0, "RunUpdated", str(run))]
    assert tx.runs == {str(run)}


def test_failed_checks_and_the_conviction_they_lead_to_are_readable(tmp_path):
    """A report_check that reaches its check's majority: CheckFailed, then ClientConvicted with the new
    reason and the checked step, stored and served as readable JSON (names, base58 keys, plain numbers)."""
    run, verifier, trainer = Pubkey.new_unique(), Pubkey.new_unique(), Pubkey.new_unique()
    failed = {
        "run": run,
        "verifier": verifier,
        "step": 12,
        "trainer": 2,
        "reason": "StateMismatch",
        "reports": 2,
    }
    convicted = {"run": run, "signer": trainer, "index": 2, "reason": "FailedVerification", "_pad": 0, "step": 12,
                 "forfeited": 40}  # fmt: skip
    logs = [f"Program {PROGRAM} invoke [1]",
            *("Program data: " + base64.b64encode(event_bytes(IDL, name, value)).decode()
              for name, value in (("CheckFailed", failed), ("ClientConvicted", convicted))),
            f"Program {PROGRAM} success"]  # fmt: skip
    args = {"step": 12, "trainer": 2, "reason": "StateMismatch"}
    signature, result = _get_transaction_result(None, logs, run, "report_check", args)
    tx = decode_transaction(IDL, PROGRAM, signature, result)
    assert [i.name for i in tx.instructions] == ["report_check"]
    shown = [(e.name, e.data) for e in tx.events]
    assert shown == [
        ("CheckFailed", {"run": str(run), "verifier": str(verifier), "step": 12, "trainer": 2,
                         "reason": "StateMismatch", "reports": 2}),
        ("ClientConvicted", {"run": str(run), "signer": str(trainer), "index": 2, "reason": "FailedVerification",
                             "step": 12, "forfeited": 40}),
    ]  # fmt: skip
    assert CheckFailed.decode(
        IDL.decode_event(event_bytes(IDL, "CheckFailed", failed))[1]
    ) == CheckFailed(run, verifier, 12, 2, CheckFailure.StateMismatch, 2)
    store = Store(tmp_path / "x.sqlite")
    store.add_transaction(PROGRAM, tx)
    stored = [(r["name"], json.loads(r["data"])) for r in store.events(str(run))]
    assert stored[::-1] == shown  # newest first


def test_a_failed_transaction_keeps_its_instructions_but_has_no_events():
    run = Pubkey.new_unique()
    logs = [
        f"Program {PROGRAM} invoke [1]",
        run_updated(run),
        f"Program {PROGRAM} failed: custom program error: 0x1770",
    ]
    signature, result = _get_transaction_result(
        {"InstructionError": [0, {"Custom": 6000}]}, logs, run
    )
    tx = decode_transaction(IDL, PROGRAM, signature, result)
    assert tx.err and tx.events == () and [i.name for i in tx.instructions] == ["tick"]


def test_malformed_answers_are_one_value_error():
    for bad in (
        {},
        {"slot": 1, "transaction": ["!!", "base64"]},
        {"slot": 1, "transaction": ["", "json"]},
    ):
        try:
            decode_transaction(IDL, PROGRAM, "sig", bad)
        except ValueError as e:
            assert "sig" in str(e) or "base64" in str(e)
        else:
            raise AssertionError(f"{bad} decoded")


def test_decoded_values_become_json():
    key = Pubkey.new_unique()
    value = {"run": key, "_pad": b"\0\0", "name": b"hello\0\0\0", "weights_sha256": b"\xab" * 32,
             "blob": b"\xff\xfe", "seed": 2**63, "n": 5, "nested": [{"x": b"a\0"}]}  # fmt: skip
    assert jsonable(value) == {"run": str(key), "name": "hello", "weights_sha256": "ab" * 32,
                               "blob": "fffe", "seed": str(2**63), "n": 5, "nested": [{"x": "a"}]}  # fmt: skip
    # digests are hex even when their bytes happen to be printable
    digests = {
        "results_root": b"ab" * 16,
        "manifest": b"cd" * 16,
        "commitment": b"ef" * 16,
        "weights_vote": b"gh" * 16,
    }
    assert jsonable(digests) == {k: v.hex() for k, v in digests.items()}


def test_only_http_urls_become_links():
    assert safe_http_url("https://example.org/a?b=c") == "https://example.org/a?b=c"
    assert safe_http_url("http://127.0.0.1:8899") == "http://127.0.0.1:8899"
    for bad in ("javascript:alert(1)", "JaVaScRiPt:alert(1)", "data:text/html,<script>", "//evil.org",
                "http://", "https://x.org/\"onmouseover=alert(1)", "https://x.org/<img>",
                "https://x .org", "vbscript:x", "", None, "kjv", "file:///etc/passwd"):  # fmt: skip
        assert safe_http_url(bad) is None, bad


def test_solana_explorer_clusters():
    assert cluster_query("https://api.devnet.solana.com") == "?cluster=devnet"
    assert cluster_query("https://api.mainnet-beta.solana.com") == ""
    assert (
        cluster_query("http://127.0.0.1:8899")
        == "?cluster=custom&customUrl=http%3A%2F%2F127.0.0.1%3A8899"
    )


def test_checkpoint_links():
    assert (
        checkpoint_url("Hub", "cohort/llama-20m", "") == "https://huggingface.co/cohort/llama-20m"
    )
    assert checkpoint_url("Hub", "a/b", "v1") == "https://huggingface.co/a/b/tree/v1"
    assert checkpoint_url("Gcs", "https://storage.example/x", "") == "https://storage.example/x"
    for bad in ("../../x", "/etc", "javascript:alert(1)", "a b", "<script>"):
        assert checkpoint_url("Hub", bad, "") is None, bad
    assert checkpoint_url("Dummy", "x/y", "") is None


def test_the_explorer_never_imports_the_training_stack():
    import subprocess
    import sys

    code = ("import sys, cohort.sdk.explorer.cli, cohort.sdk.cli_idl; "
            "print(sorted({'torch', 'transformers', 'iroh'} & set(sys.modules)))")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr


def test_a_replaced_witness_record_is_one_witness_of_its_step(tmp_path):
    """A witness may replace its record until the step is decided: the explorer keeps its latest metrics."""
    run = str(Pubkey.new_unique())

    def witnessed(signature: str, index: int, loss: float) -> DecodedTransaction:
        data = {"run": run, "signer": "w", "step": 7, "index": index, "metadata": {"loss": loss}}
        return DecodedTransaction(
            signature, 1, None, None, (), (DecodedEvent(0, "WitnessSubmitted", run, data),)
        )

    store = Store(tmp_path / "x.sqlite")
    for signature, index, loss in (("a", 0, 3.0), ("b", 1, 2.0), ("c", 0, 1.0)):
        store.add_transaction(PROGRAM, witnessed(signature, index, loss))
    assert [(r["client_index"], r["loss"]) for r in store.recent_rounds(run)] == [
        (1, 2.0),
        (0, 1.0),
    ]
    store.close()
