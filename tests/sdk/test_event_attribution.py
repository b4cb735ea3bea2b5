"""Idl.events_in_logs on hand-written Agave logs: only `Program data:` lines the coordinator itself logged, in
invocations seen to succeed, are its events. Any other program can log the same bytes (a forged
ClientJoined once rewrote a member's address), and a failed or truncated log proves less than it shows."""

from __future__ import annotations

import base64

import pytest
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from support.event_forger import event_bytes

from cohort.sdk.coordinator_core import load_idl

IDL = load_idl()
COORDINATOR = str(Keypair().pubkey())
FORGER = str(Keypair().pubkey())
SYSTEM = "11111111111111111111111111111111"
RUN = Pubkey.new_unique()


def joined(endpoint: str) -> str:
    """A `Program data:` line carrying a ClientJoined whose endpoint tells the lines apart."""
    value = {"run": RUN, "signer": RUN, "p2p_identity": RUN, "endpoint": endpoint}
    return "Program data: " + base64.b64encode(event_bytes(IDL, "ClientJoined", value)).decode()


def invoke(program: str, depth: int) -> str:
    return f"Program {program} invoke [{depth}]"


def success(program: str) -> str:
    return f"Program {program} success"


def consumed(program: str) -> str:
    return f"Program {program} consumed 2911 of 200000 compute units"


def endpoints(logs: list[str], program: Pubkey | str = COORDINATOR) -> list[str]:
    events = IDL.events_in_logs(logs, program)
    assert all(name == "ClientJoined" for name, _ in events)
    return [value["endpoint"].rstrip(b"\0").decode() for _, value in events]


def test_only_lines_logged_while_the_program_is_innermost_count():
    logs = [
        invoke(COORDINATOR, 1), joined("own-1"),
        invoke(FORGER, 2), joined("callee"), "Program return: " + FORGER + " AQID", success(FORGER),
        joined("own-2"),  # back in the coordinator after its CPI returned
        invoke(SYSTEM, 2), success(SYSTEM),
        consumed(COORDINATOR), success(COORDINATOR),
    ]  # fmt: skip
    assert endpoints(logs) == ["own-1", "own-2"]
    assert endpoints(logs, Pubkey.from_string(COORDINATOR)) == ["own-1", "own-2"]  # a Pubkey too
    assert endpoints(logs, FORGER) == ["callee"]  # any program's own events, by the same rule


def test_the_coordinator_called_by_another_program_still_logs_its_own_events():
    logs = [
        invoke(FORGER, 1), joined("caller"),
        invoke(COORDINATOR, 2), joined("own"), success(COORDINATOR),
        joined("caller-again"), success(FORGER),
    ]  # fmt: skip
    assert endpoints(logs) == ["own"]


def test_forged_events_before_and_after_a_coordinator_instruction_do_not_count():
    logs = [
        invoke(FORGER, 1), joined("forged-before"), consumed(FORGER), success(FORGER),
        invoke(COORDINATOR, 1), joined("own"), success(COORDINATOR),
        invoke(FORGER, 1), joined("forged-after"), success(FORGER),
        joined("outside-any-invocation"),
    ]  # fmt: skip
    assert endpoints(logs) == ["own"]
    assert endpoints([invoke(FORGER, 1), joined("forged"), success(FORGER)]) == []


def test_a_program_cannot_fake_the_runtimes_lines():
    # sol_log prefixes "Program log: ", whatever the message holds (newlines included)
    logs = [
        invoke(FORGER, 1),
        f"Program log: {success(FORGER)}",
        f"Program log: x\n{invoke(COORDINATOR, 2)}",
        joined("forged"),
        success(FORGER),
    ]
    assert endpoints(logs) == []


def test_nothing_of_a_failed_transaction_counts():
    done = [invoke(COORDINATOR, 1), joined("own"), success(COORDINATOR)]
    # a later instruction failed: the whole transaction, the coordinator's own part too, never happened
    failed = f"Program {FORGER} failed: custom program error: 0x1"
    assert endpoints([*done, invoke(FORGER, 1), failed]) == []
    # the coordinator's own invocation failed
    assert endpoints([invoke(COORDINATOR, 1), joined("own"),
                      f"Program {COORDINATOR} failed: custom program error: 0x1770"]) == []  # fmt: skip
    # a CPI failed, which fails its caller
    assert endpoints([invoke(COORDINATOR, 1), joined("own"), invoke(SYSTEM, 2),
                      f"Program {SYSTEM} failed: insufficient lamports"]) == []  # fmt: skip
    # an invocation that never ended (logs cut short): its outcome is unknown
    assert endpoints([*done, invoke(COORDINATOR, 1), joined("unfinished")]) == ["own"]


@pytest.mark.parametrize(
    "after",
    [
        # Agave drops each line that does not fit what is left, and keeps a shorter later one: here the
        # forger's invoke line is gone and its data line got in
        [joined("forged"), success(COORDINATOR)],
        # later lines that look complete are not trusted either: any of their neighbours may be missing
        [success(COORDINATOR), invoke(COORDINATOR, 1), joined("after"), success(COORDINATOR)],
        [invoke(COORDINATOR, 2), joined("nested"), success(COORDINATOR)],
    ],
)
def test_nothing_after_log_truncated_counts(after):
    before = [invoke(COORDINATOR, 1), joined("proven"), success(COORDINATOR)]
    opened = [invoke(COORDINATOR, 1), joined("open-at-truncation")]
    assert endpoints([*before, *opened, "Log truncated", *after]) == ["proven"]


def test_logs_that_contradict_the_invocation_stack_stop_the_parse():
    proven = [invoke(COORDINATOR, 1), joined("proven"), success(COORDINATOR)]
    for broken in (
        [invoke(COORDINATOR, 2), joined("wrong depth"), success(COORDINATOR)],  # depth 1 expected
        [invoke(FORGER, 1), success(COORDINATOR), joined("after an exit of not the innermost")],
        [success(COORDINATOR), invoke(COORDINATOR, 1), joined("after an exit of nothing")],
    ):
        assert endpoints([*proven, *broken, *proven]) == ["proven"], broken


def test_garbage_lines_are_skipped():
    logs = [
        "",
        "garbage",
        "Program data:",
        invoke(COORDINATOR, 1),
        "Program data: !!!not base64",
        "Program data: " + base64.b64encode(b"short").decode(),
        "Program data: " + base64.b64encode(b"\0" * 8 + bytes(200)).decode(),  # unknown discriminator
        "Program data: " + base64.b64encode(event_bytes(IDL, "ClientJoined", {
            "run": RUN, "signer": RUN, "p2p_identity": RUN, "endpoint": ""})[:-1]).decode(),  # cut short
        "Program data: AAAA " + joined("second field").removeprefix("Program data: "),
        f"Program {COORDINATOR} invoke [x]",  # not an invoke line: skipped like any other text
        "Program log: hello",
        "Program consumption: 1234 units remaining",
        "Deployed program " + COORDINATOR,
        consumed(COORDINATOR),
        success(COORDINATOR),
    ]  # fmt: skip
    assert endpoints(logs) == ["second field"]
    assert endpoints([]) == []
