"""`cohort demo`: the end-to-end walk through what exists, on one machine with no network.

Today: build the programs, deploy the toolchain probe through real upgradeable-loader transactions into
Agave's runtime (LiteSVM), and run each of its instructions. It grows into the local training demo.
"""

from __future__ import annotations

import hashlib
import struct
import time
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table
from solders.instruction import AccountMeta, Instruction
from solders.keypair import Keypair
from solders.litesvm import LiteSVM
from solders.message import Message
from solders.pubkey import Pubkey
from solders.system_program import ID as SYSTEM_PROGRAM
from solders.transaction import Transaction
from solders.transaction_metadata import TransactionMetadata

from cohort.sbf import build

from . import loader_v3


@dataclass
class _Local:
    svm: LiteSVM
    payer: Keypair

    def send(self, instructions: list[Instruction], signers: list[Keypair]) -> TransactionMetadata:
        tx = Transaction(
            [self.payer, *signers],
            Message(instructions, self.payer.pubkey()),
            self.svm.latest_blockhash(),
        )
        result = self.svm.send_transaction(tx)
        self.svm.expire_blockhash()
        if not isinstance(result, TransactionMetadata):
            logs = "\n".join(result.meta().logs())
            raise RuntimeError(f"transaction failed: {result.err()}\n{logs}")
        return result


def run(console: Console | None = None) -> None:
    console = console or Console()
    console.rule("[bold]cohort demo")
    console.print("[bold]1.[/] build the Solana programs (C → SBF)")
    programs = {p.name: p for p in build.build_all(log=lambda line: console.print(f"   {line}"))}
    probe = programs["toolchain_probe"]

    console.print("[bold]2.[/] deploy through upgradeable-loader transactions into Agave's runtime")
    local = _Local(LiteSVM(), Keypair())
    local.svm.airdrop(local.payer.pubkey(), 10 * 10**9)
    elf = probe.so_path.read_bytes()
    program = Keypair()
    started = time.perf_counter()
    phases = loader_v3.plan_deploy(
        local.payer, elf, Keypair(), local.svm.minimum_balance_for_rent_exemption, program=program
    )
    sent = 0
    for phase in phases:
        for step in phase:
            local.send(step.instructions, step.signers)
            sent += 1
    console.print(
        f"   program {program.pubkey()} deployed: {len(elf)} bytes in {sent} transactions "
        f"({time.perf_counter() - started:.2f} s)"
    )

    console.print("[bold]3.[/] invoke each instruction")
    table = Table("instruction", "result", "compute units")
    pid = program.pubkey()
    payer = local.payer.pubkey()
    message = b"cohort trains language models together"
    r = local.send([Instruction(pid, bytes([4]) + message, [])], [])
    match = bytes(r.return_data().data) == hashlib.sha256(message).digest()
    table.add_row(
        "sha256 syscall",
        "equals hashlib" if match else "[red]MISMATCH",
        str(r.compute_units_consumed()),
    )
    r = local.send([Instruction(pid, bytes([7]) + struct.pack("<QB", 7, 12), [])], [])
    table.add_row(
        "shuffle (cross-object call)",
        str(list(bytes(r.return_data().data))),
        str(r.compute_units_consumed()),
    )
    vault, bump = Pubkey.find_program_address([b"vault", bytes(payer)], pid)
    accounts = [
        AccountMeta(payer, True, True),
        AccountMeta(vault, False, True),
        AccountMeta(SYSTEM_PROGRAM, False, False),
    ]
    r = local.send([Instruction(pid, bytes([2]) + struct.pack("<Q", 64), accounts)], [])
    owner = local.svm.get_account(vault).owner
    table.add_row(
        "create PDA via CPI",
        f"{vault} (bump {bump}, owner = program: {owner == pid})",
        str(r.compute_units_consumed()),
    )
    r = local.send([Instruction(pid, bytes([0]) + b"hi", [])], [])
    table.add_row(
        "logs", r.logs()[1].removeprefix("Program log: "), str(r.compute_units_consumed())
    )
    console.print(table)
    console.print("[green]done.[/] Next: `cohort --help`.")
