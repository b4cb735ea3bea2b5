"""The training client's state machine: chain state, peer messages, fetch and work completions and the
passing of time go in; actions come out (train step t, publish, fetch, apply, witness, tick, health-check,
leave, checkpoint, vote). No I/O: `runtime/loop.py` follows the chain, feeds `handle` and carries out what
it returns; everything here is decided from what was fed in, so it is tested without chain, peers or model.

The client's behaviour is a function of the newest chain state plus its own progress (steps trained and
applied, records submitted), re-planned after every event: a missed update or a jump of several phases is
caught up on the next one, and nothing is asked twice while it is in flight.

One epoch, in steps (psyche-reference 3.4, with seeds one round ahead):
    train t       as soon as t's batch is known (its round, or the next one), t-1 is trained and t-d applied
                  (d: the run's pipeline_depth, 2 to 4)
    publish t     the payload, announced with a signed statement (two for one step prove equivocation)
    fetch         every expected trainer's result of the live steps, each checked before it is kept (valid or
                  not per (trainer, commitment): a payload names its batch, so a copy is invalid for its copier)
    apply t       once the round that attests t decided it: exactly the decided results list, the same
                  everywhere (fetched by its root when ours differs); a step decided empty applies nothing
    witness       (a seat) step t-1's results once all expected are held, or a bounded grace after a
                  majority arrived; replaced while undecided when more arrived, so honest seats converge
    health-check  what a majority of the previous round's seats left out (the chain's own rule)
    drift         the weights digest a strict majority of seats reported against ours: leave on mismatch
    Cooldown      apply what was decided, write the checkpoint, vote its hash

The package, by phase: joining.py (warmup), training.py (rounds), witnessing.py (a seat's part),
verification.py (checks), cooldown.py (epoch end); core.py dispatches events to them; events.py and
actions.py are the vocabulary.
"""

from __future__ import annotations

from .actions import (
    Action,
    Allow,
    AnnounceReady,
    Apply,
    Check,
    Emit,
    Fetch,
    FetchList,
    Finish,
    HealthCheck,
    Join,
    LeaveEpoch,
    PrepareEpoch,
    Publish,
    ReadRecords,
    ReleaseState,
    ReportCheck,
    ReportEquivocation,
    SaveCheckpoint,
    ServeList,
    SubmitWitness,
    Tick,
    Train,
    Transaction,
    VoteWeights,
    WarmupWitness,
    tx_fields,
    tx_name,
)
from .book import StepBook
from .core import LOST_RACE, REFUSALS, ClientMachine
from .events import (
    Applied,
    ApplyFailed,
    ChainUpdate,
    Checked,
    EpochPrepared,
    Event,
    ListHeld,
    PeerReady,
    PeerResult,
    RecordsRead,
    ResultFailed,
    ResultHeld,
    RunClosed,
    Saved,
    StopRequested,
    TimerFired,
    Trained,
    TrainFailed,
    TxDone,
)
from .timing import Timing
from .training import CHECKED_STEPS, SPEED_WINDOW

__all__ = [
    "CHECKED_STEPS",
    "LOST_RACE",
    "REFUSALS",
    "SPEED_WINDOW",
    "Action",
    "Allow",
    "AnnounceReady",
    "Applied",
    "Apply",
    "ApplyFailed",
    "ChainUpdate",
    "Check",
    "Checked",
    "ClientMachine",
    "Emit",
    "EpochPrepared",
    "Event",
    "Fetch",
    "FetchList",
    "Finish",
    "HealthCheck",
    "Join",
    "LeaveEpoch",
    "ListHeld",
    "PeerReady",
    "PeerResult",
    "PrepareEpoch",
    "Publish",
    "ReadRecords",
    "RecordsRead",
    "ReleaseState",
    "ReportCheck",
    "ReportEquivocation",
    "ResultFailed",
    "ResultHeld",
    "RunClosed",
    "SaveCheckpoint",
    "Saved",
    "ServeList",
    "StepBook",
    "StopRequested",
    "SubmitWitness",
    "Tick",
    "TimerFired",
    "Timing",
    "Train",
    "TrainFailed",
    "Trained",
    "Transaction",
    "TxDone",
    "VoteWeights",
    "WarmupWitness",
    "tx_fields",
    "tx_name",
]
