"""What the machine asks the loop to carry out (effects.py does, one task per action at most)."""

from __future__ import annotations

from dataclasses import dataclass

from ..messages import Result
from ..options import ExitCode
from ..results_list import ResultsList


@dataclass(frozen=True)
class Join:
    throughput: int = (
        0  # tokens/s we train at, as measured (0 = not measured yet: the chain counts the median)
    )


@dataclass(frozen=True)
class PrepareEpoch:
    epoch: int
    load: str  # "keep" (our weights are the epoch's), "start" (a new run's first weights), "checkpoint"


@dataclass(frozen=True)
class AnnounceReady:
    epoch: int


@dataclass(frozen=True)
class WarmupWitness:
    index: int


@dataclass(frozen=True)
class Train:
    epoch: int
    step: int
    batch: tuple[int, int]


@dataclass(frozen=True)
class Publish:
    step: int
    batch: tuple[int, int]
    commitment: bytes
    size: int


@dataclass(frozen=True)
class Fetch:
    step: int
    sender: int
    commitment: bytes
    batch: tuple[int, int] | None  # the batch the chain gave the trainer (its payload must say so)
    # its trainer is asked last, not first: the seats that decided it hold it, or another trainer announced the
    # same commitment (a copier must not hold up the fetch of what it copied)
    decided: bool = False


@dataclass(frozen=True)
class FetchList:
    step: int
    root: bytes
    holders: tuple[int, ...]  # the seats whose record holds this root: they serve it
    clients: int  # the epoch's client count (entries index it)


@dataclass(frozen=True)
class ServeList:
    """Serve a decided results list we built from the results we hold (under its root, as seats serve
    theirs and replicas the lists they fetched): every holder of a decided list answers for it."""

    results: ResultsList


@dataclass(frozen=True)
class Apply:
    epoch: int
    step: int
    commitments: tuple[bytes, ...]


@dataclass(frozen=True)
class SubmitWitness:
    step: int
    index: int
    position: int
    results: ResultsList
    weights_digest: int


@dataclass(frozen=True)
class ReadRecords:
    step: int  # the round whose witness records to read (the read finds its slot in the newest Run)


@dataclass(frozen=True)
class HealthCheck:
    step: int  # the step whose trainers are reported: the records of the round after it decide
    indices: tuple[int, ...]


@dataclass(frozen=True)
class ReportEquivocation:
    index: int
    first: Result
    second: Result


@dataclass(frozen=True)
class Check:
    """Replay `trainer`'s result of `step` (commitment `commitment`) from the states it committed in it and
    in its result of step - 1 (`previous`): the chain's seed made us one of its verifiers."""

    epoch: int
    step: int
    trainer: int
    commitment: bytes
    previous: bytes
    seed: int  # the chain's check seed of `step`: it also draws the bands the check compares
    # we are on the committee of the dispute a failed check opened: the same replay
    dispute: bool = False


@dataclass(frozen=True)
class ReleaseState:
    """No check can read our committed state of `step` any more: the seeds of `step` and `step + 1` drew no
    check of ours (a check of step s reads the states of s - 1 and s), so no dispute can either."""

    step: int


@dataclass(frozen=True)
class ReportCheck:
    step: int
    trainer: int
    failure: str  # a CheckFailure name


@dataclass(frozen=True)
class Tick:
    nonce: int


@dataclass(frozen=True)
class SaveCheckpoint:
    epoch: int
    step: int


@dataclass(frozen=True)
class VoteWeights:
    index: int
    step: int
    manifest: bytes


@dataclass(frozen=True)
class LeaveEpoch:
    epoch: int | None
    reason: str


@dataclass(frozen=True)
class Allow:
    members: tuple[int, ...]  # epoch indices of healthy members: the allowlist and gossip overlay
    overlay_key: (
        bytes | None
    )  # the epoch's first round seed once it exists (unknown when members joined)


@dataclass(frozen=True)
class Emit:
    event: str
    fields: dict


@dataclass(frozen=True)
class Finish:
    code: ExitCode
    reason: str = ""


Action = (Join | PrepareEpoch | AnnounceReady | WarmupWitness | Train | Publish | Fetch | FetchList | ServeList
          | Apply | SubmitWitness | ReadRecords | HealthCheck | ReportEquivocation | Check | ReleaseState | ReportCheck | Tick
          | SaveCheckpoint | VoteWeights | LeaveEpoch | Allow | Emit | Finish)  # fmt: skip


# What the machine sends to the chain (LeaveEpoch's exit_run included): each comes back as a TxDone carrying it.
Transaction = (Join | WarmupWitness | SubmitWitness | HealthCheck | ReportEquivocation | ReportCheck | Tick
               | VoteWeights | LeaveEpoch)  # fmt: skip


def tx_name(action: Transaction) -> str:
    """The name a transaction goes by in the machine's in-flight set and retry times, and in events."""
    match action:
        case Join():
            return "join"
        case WarmupWitness():
            return "warmup_witness"
        case SubmitWitness():
            return "witness"
        case HealthCheck():
            return "health_check"
        case ReportEquivocation():
            return "report_equivocation"
        case ReportCheck():
            return "report_check"
        case Tick():
            return "tick"
        case VoteWeights():
            return "vote_weights"
        case LeaveEpoch():
            return "leave"


def tx_fields(action: Transaction) -> dict[str, int]:
    """What identifies a landed transaction in its event."""
    match action:
        case Join() | LeaveEpoch():
            return {"key": 0}
        case WarmupWitness(index) | ReportEquivocation(index):
            return {"key": index}
        case SubmitWitness(step) | HealthCheck(step) | VoteWeights(step=step):
            return {"key": step}
        case ReportCheck(step, trainer):
            return {"step": step, "trainer": trainer}
        case Tick(nonce):
            return {"key": nonce}
