"""The event_forger example program (contracts/examples/event_forger): it logs its instruction data with
`sol_log_data`, so tests can make a program other than the coordinator log the exact bytes of one of the
coordinator's events, and check that nobody believes them."""

from __future__ import annotations

from typing import Any

from solders.instruction import AccountMeta, Instruction
from solders.pubkey import Pubkey

from cohort.sbf import build
from cohort.sdk.idl import Idl


def event_bytes(idl: Idl, name: str, value: dict[str, Any]) -> bytes:
    """An event as the program logs it: Anchor's discriminator sha256("event:<Name>")[:8], then Borsh."""
    (discriminator,) = [d for d, n in idl.events.items() if n == name]
    return discriminator + idl.encode({"defined": {"name": name}}, value)


def forger_elf() -> bytes:
    (program,) = build.build_all(["event_forger"], log=lambda _: None)
    return program.so_path.read_bytes()


def forge(forger: Pubkey, payload: bytes, *writable: Pubkey) -> Instruction:
    """An instruction of the forger that logs `payload` and lists `writable` (e.g. a Run account)."""
    return Instruction(
        forger, payload, [AccountMeta(a, is_signer=False, is_writable=True) for a in writable]
    )
