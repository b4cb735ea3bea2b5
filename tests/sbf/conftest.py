"""Fixtures for the C -> SBF toolchain tests: the probe program built once, and a LiteSVM to run it in."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest
from solders.instruction import Instruction
from solders.keypair import Keypair
from solders.litesvm import LiteSVM
from solders.message import Message
from solders.pubkey import Pubkey
from solders.transaction import Transaction
from solders.transaction_metadata import FailedTransactionMetadata, TransactionMetadata

from cohort.sbf import build

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="session")
def probe() -> build.Program:
    """The toolchain_probe program, built (or found up to date) for SBF and the host."""
    (program,) = build.build_all(["toolchain_probe"], log=lambda _: None)
    return program


class Chain:
    """A LiteSVM with a funded payer and one-call transaction sending."""

    def __init__(self) -> None:
        self.svm = LiteSVM()
        self.payer = Keypair()
        self.svm.airdrop(self.payer.pubkey(), 100 * 10**9)

    def send(
        self, instructions: Sequence[Instruction], signers: Sequence[Keypair] = ()
    ) -> TransactionMetadata | FailedTransactionMetadata:
        message = Message(list(instructions), self.payer.pubkey())
        tx = Transaction([self.payer, *signers], message, self.svm.latest_blockhash())
        result = self.svm.send_transaction(tx)
        self.svm.expire_blockhash()  # identical transactions would be rejected as duplicates
        return result

    def ok(
        self, instructions: Sequence[Instruction], signers: Sequence[Keypair] = ()
    ) -> TransactionMetadata:
        result = self.send(instructions, signers)
        assert isinstance(result, TransactionMetadata), f"{result.err()}\n" + "\n".join(
            result.meta().logs()
        )
        return result

    def fails(self, instructions: Sequence[Instruction], signers: Sequence[Keypair] = ()):
        result = self.send(instructions, signers)
        assert isinstance(result, FailedTransactionMetadata), "transaction unexpectedly succeeded"
        return result.err()


@pytest.fixture
def chain() -> Chain:
    return Chain()


@pytest.fixture
def probe_id(chain: Chain, probe: build.Program) -> Pubkey:
    """The probe loaded into the chain's SVM (the quick path; one test deploys through the loader)."""
    program_id = Keypair().pubkey()
    chain.svm.add_program(program_id, probe.so_path.read_bytes())
    return program_id


@pytest.fixture
def compile_fixture(tmp_path: Path):
    """Compile tests/sbf/fixtures/<name> for BPF with the project's flags (an -mcpu among the extras wins)."""

    def compile_(name: str, extra_flags: Sequence[str] = ()) -> Path:
        return _compile_bpf(FIXTURES / name, tmp_path, extra_flags)

    return compile_


def _compile_bpf(source: Path, out_dir: Path, extra_flags: Sequence[str] = ()) -> Path:
    obj = out_dir / (source.stem + ".o")
    flags = [f for f in build.sbf_cflags() if f not in extra_flags and not f.startswith("-mcpu")]
    mcpu = next((f for f in extra_flags if f.startswith("-mcpu")), "-mcpu=v2")
    others = [f for f in extra_flags if not f.startswith("-mcpu")]
    command = [build.find_clang(), *flags, mcpu, *others, f"-I{build.SDK_INCLUDE}", "-c", str(source),
               "-o", str(obj)]  # fmt: skip
    subprocess.run(command, check=True, capture_output=True)
    return obj
