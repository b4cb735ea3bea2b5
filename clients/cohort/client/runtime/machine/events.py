"""What the loop feeds the machine: chain updates, peer messages, completions of its actions, time."""

from __future__ import annotations

from dataclasses import dataclass

from cohort.sdk.models import WitnessRecord

from ..messages import Result
from ..results_list import ResultsList
from ..rounds import ChainView
from .actions import Transaction


@dataclass(frozen=True)
class ChainUpdate:
    view: ChainView


@dataclass(frozen=True)
class PeerReady:
    sender: int
    epoch: int


@dataclass(frozen=True)
class PeerResult:
    sender: int
    result: Result  # its statement signature was checked by the exchange


@dataclass(frozen=True)
class ResultHeld:
    step: int
    sender: int
    commitment: bytes  # the payload is in the blob store, checked


@dataclass(frozen=True)
class ResultFailed:
    step: int
    sender: int
    commitment: bytes
    bad: bool  # the payload itself was invalid (not merely unavailable)
    reason: str


@dataclass(frozen=True)
class ListHeld:
    step: int
    root: bytes
    results: ResultsList | None  # None: not obtained (yet)


@dataclass(frozen=True)
class EpochPrepared:
    epoch: int
    ok: bool
    digest: int = 0  # sampled digest of the epoch's starting weights
    reason: str = ""


@dataclass(frozen=True)
class Trained:
    epoch: int
    step: int
    batch: tuple[int, int]
    commitment: bytes
    size: int
    loss: float
    tokens: int
    seconds: float
    waited: float = 0.0  # seconds the step queued for the model worker before it began


@dataclass(frozen=True)
class TrainFailed:
    epoch: int
    step: int
    reason: str


@dataclass(frozen=True)
class ApplyFailed:
    """Applying `step`'s decided results failed on the model worker: our weights are no longer the epoch's."""

    epoch: int
    step: int
    reason: str


@dataclass(frozen=True)
class Applied:
    epoch: int
    step: int
    results: int
    digest: int  # sampled digest of the weights after this step


@dataclass(frozen=True)
class Saved:
    epoch: int
    step: int
    manifest: bytes
    digest: str  # sha256 of every parameter (replicas compare it)


@dataclass(frozen=True)
class TxDone:
    """A transaction the machine asked for landed (ok) or failed."""

    action: Transaction
    ok: bool
    error: str = ""  # the program error's name, or "rpc" for a transport failure


@dataclass(frozen=True)
class RecordsRead:
    step: int
    records: tuple[WitnessRecord, ...]


@dataclass(frozen=True)
class StopRequested:
    reason: str = "stop"


@dataclass(frozen=True)
class RunClosed:
    pass


@dataclass(frozen=True)
class Checked:
    """A check we ran of a trainer's step: passed, or failed with the report's reason."""

    epoch: int
    step: int
    trainer: int
    passed: bool
    reason: str  # one line
    failure: str = ""  # the CheckFailure name a failed check reports ("" when it could not be run)
    dispute: bool = False  # a dispute's replay: its verdict is reported either way


@dataclass(frozen=True)
class TimerFired:
    pass


Event = (ChainUpdate | PeerReady | PeerResult | ResultHeld | ResultFailed | ListHeld | EpochPrepared | Trained
         | TrainFailed | Applied | ApplyFailed | Saved | TxDone | RecordsRead | Checked | StopRequested | RunClosed
         | TimerFired)  # fmt: skip
