"""Predictions from the coordinator's host build (the chain's own code): who witnesses this round, which
batches a client trains, and what a tick would do now."""

from __future__ import annotations

from dataclasses import dataclass

from solders.pubkey import Pubkey

from .coordinator_core import CoordinatorCore, Env
from .models import Run, RunState


def _round_bytes(core: CoordinatorCore, run: Run) -> bytes | None:
    return core.round_bytes(run.data[8:])


def elected_witnesses(core: CoordinatorCore, run: Run) -> dict[int, int]:
    """Epoch index → witness position of this round's elected witnesses (empty outside rounds)."""
    if not run.round_active:
        return {}
    round_ = _round_bytes(core, run)
    if round_ is None:
        return {}
    out = {}
    for client in run.clients:
        position = core.witness_position(round_, client.index)
        if position is not None and position < run.config.witness_nodes:
            out[client.index] = position
    return out


def batches_of(core: CoordinatorCore, run: Run, signer: Pubkey) -> list[tuple[int, int]]:
    """The sequence intervals [start, end) `signer` trains this round (empty if it trains none)."""
    client = run.client(signer)
    round_ = _round_bytes(core, run)
    if client is None or round_ is None or not run.round_active:
        return []
    order = core.trainer_order(round_)
    return [
        core.batch_interval(round_, len(order), k)
        for k, index in enumerate(order)
        if index == client.index
    ]


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
