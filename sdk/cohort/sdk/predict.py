"""Predictions from the coordinator's host build (the chain's own code): who holds a witness seat this
round, which batches a client trains, and what a tick would do now."""

from __future__ import annotations

from dataclasses import dataclass

from solders.pubkey import Pubkey

from .coordinator_core import CoordinatorCore, Env
from .models import Run, RunState


def _round_bytes(core: CoordinatorCore, run: Run) -> bytes | None:
    return core.round_bytes(run.data[8:])


def elected_witnesses(core: CoordinatorCore, run: Run) -> dict[int, int]:
    """Epoch index → seat (its witness position) of this round's seated witnesses, in seat order (empty
    outside rounds): the first witness_nodes positions of the round's witness order whose client is
    healthy (and no persistent dissenter) or has already witnessed."""
    if not run.round_active or _round_bytes(core, run) is None:
        return {}
    state = run.data[8:]
    seats = {c.index: core.witness_seat(state, c.index) for c in run.clients}
    return dict(
        sorted(((i, p) for i, p in seats.items() if p is not None), key=lambda item: item[1])
    )


def batches_of(core: CoordinatorCore, run: Run, signer: Pubkey) -> list[tuple[int, int]]:
    """The sequence intervals [start, end) `signer` trains this round (empty if it trains none)."""
    client = run.client(signer)
    round_ = _round_bytes(core, run)
    if client is None or round_ is None or not run.round_active:
        return []
    batch = core.assignment(run.data[8:], round_).get(client.index)
    return [batch] if batch is not None else []


@dataclass(frozen=True)
class TickForecast:
    """What a `tick` sent at `now` would do: the next phase, or the program error it would fail with."""

    next_state: RunState | None
    error: str | None


def forecast_tick(core: CoordinatorCore, run: Run, now: int) -> TickForecast:
    state = bytearray(run.data[8:])
    code = core.tick(state, Env(now, bytes(32), run.address))
    if code:
        known = core.idl.error(code)
        return TickForecast(None, known.name if known else str(code))
    after = core.idl.decode_account("Run", core.idl.accounts["Run"] + bytes(state))
    return TickForecast(RunState(after["run_state"]), None)
