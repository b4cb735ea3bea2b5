"""What the machine knows of one step's results."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..messages import Result


@dataclass
class StepBook:
    """What we know of one step's results."""

    step: int
    announced: dict[int, Result] = field(default_factory=dict)  # the first Result per trainer
    announced_at: dict[int, float] = field(
        default_factory=dict
    )  # trainer -> when its Result reached us
    # trainer -> when we first asked for its announced result: its serve time runs from then, since we fetch
    # one result per trainer at a time (one announced while its previous one still came waits for that)
    asked_at: dict[int, float] = field(default_factory=dict)
    held: dict[int, bytes] = field(
        default_factory=dict
    )  # trainer -> commitment, payload checked and kept
    # (trainer, commitment) pairs whose payload was invalid for that trainer. Per pair, never per trainer: an
    # equivocator's invalid twin must not stop us taking its valid twin when the seats decided that one
    bad: set[tuple[int, bytes]] = field(default_factory=set)
    equivocated: set[int] = field(default_factory=set)
    retry_at: dict[bytes, float] = field(
        default_factory=dict
    )  # commitment -> when to try fetching again
    attempts: dict[bytes, int] = field(default_factory=dict)  # commitment -> failed fetches so far
    majority_at: float | None = None  # when we first held a majority of the expected results
    late: set[int] = field(
        default_factory=set
    )  # trainers a seat reported late (announced, not served in time)
