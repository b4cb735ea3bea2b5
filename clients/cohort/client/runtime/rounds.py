"""Per-round bookkeeping, decided only from chain state and what peers sent: the pure core of the loop.

A round of height h trains step s. Witnesses of round h attest the results of round h-1 (participants
bitmap + a salted Bloom of commitments); the results of step s-2 are applied at the start of round h
using round h-1's witnesses. Everything here uses the coordinator's host build, the chain's own code.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from solders.pubkey import Pubkey

from cohort.sdk.coordinator_core import CoordinatorCore
from cohort.sdk.models import Run, RunState


def round_step(run: Run) -> int:
    """The step of the run's newest stored round. The step counter moves on when a round ends, before the
    next round exists: in Cooldown, and while the next round's seed is pending."""
    ended = run.state == RunState.Cooldown or (run.state == RunState.RoundWitness and run.seed_pending)
    return run.progress.step - 1 if ended else run.progress.step


def drifted(run: Run, saved_step: int | None, saved_hash: bytes | None) -> bool:
    """Whether the checkpoint the run's checkpointers committed for the epoch end we also saved differs from
    ours: our replica drifted (another GPU or BLAS can flip a near-zero sign) and must take theirs."""
    pointer = run.model.checkpoint
    if saved_step is None or saved_hash is None or pointer.step != saved_step:
        return False
    return pointer.weights_sha256 not in (bytes(32), saved_hash)


def trains(run: Run, step: int) -> bool:
    """Whether step `step` is trained: not in the two flush rounds that end a timed-out epoch."""
    return run.last_step == 0 or step + 2 < run.last_step


@dataclass(frozen=True)
class WitnessProof:
    index: int
    position: int
    participants: bytes
    salt: int
    bloom: bytes

    def saw(self, index: int) -> bool:
        return bool(self.participants[index // 8] >> (index % 8) & 1)


@dataclass(frozen=True)
class RoundView:
    """One stored round of the current epoch, as the chain holds it."""

    height: int
    step: int
    seed: int
    raw: bytes
    active_mask: bytes
    witnesses: tuple[WitnessProof, ...]

    def active(self, index: int) -> bool:
        return bool(self.active_mask[index // 8] >> (index % 8) & 1)


def round_view(core: CoordinatorCore, run: Run, back: int = 0) -> RoundView | None:
    """Round `back` rounds before the current one (None if this epoch does not hold it)."""
    if run.state not in (RunState.RoundTrain, RunState.RoundWitness, RunState.Cooldown):
        return None  # in Warmup the epoch has no round yet (the stored one is blank)
    raw = core.round_bytes(run.data[8:], back)
    if raw is None:
        return None
    value, _ = core.idl.decode({"defined": {"name": "Round"}}, raw)
    proofs = tuple(
        WitnessProof(w["index"], w["position"], bytes(w["participants"]), w["bloom_salt"],
                     bytes(w["broadcast_bloom"]))
        for w in value["witnesses"][: value["witnesses_len"]]
    )
    return RoundView(value["height"], round_step(run) - back, value["random_seed"], raw,
                     bytes(value["active_mask"]), proofs)


def assignments(core: CoordinatorCore, view: RoundView) -> dict[int, tuple[int, int]]:
    """Epoch client index → the batch [start, end) it trains in this round (the chain's own assignment)."""
    order = core.trainer_order(view.raw)
    out = {}
    for k, index in enumerate(order):
        start, end = core.batch_interval(view.raw, len(order), k)
        if end > start:
            out[index] = (start, end)
    return out


def witness_position(core: CoordinatorCore, run: Run, view: RoundView, index: int) -> int | None:
    """Our place in the round's witness shuffle if it lets us witness: one of the first witness_nodes, or a
    stand-in for a trainer no longer healthy (the chain accepts witness_slots positions, records witness_nodes)."""
    position = core.witness_position(view.raw, index)
    return position if position is not None and position < core.witness_slots(run.data[8:]) else None


def my_index(run: Run, wallet: Pubkey) -> int | None:
    client = run.client(wallet)
    return client.index if client is not None else None


@dataclass
class StepBook:
    """What this client holds of one step: verified results by trainer index, and who said Finished."""

    step: int
    results: dict[int, tuple[bytes, bytes]] = field(default_factory=dict)  # index -> (commitment, payload)
    announced: dict[int, bytes] = field(default_factory=dict)  # index -> commitment first announced
    batches: dict[int, tuple[int, int]] = field(default_factory=dict)  # index -> the batch its result trained
    finished: set[int] = field(default_factory=set)
    loss: float | None = None
    tokens: int = 0
    seconds: float = 0.0
    trained: bool = False


def participants_and_bloom(core: CoordinatorCore, book: StepBook | None,
                           assigned: dict[int, tuple[int, int]] | None = None) -> tuple[bytes, int, bytes]:  # fmt: skip
    """A witness's proof of the results it holds: the participants bitmap, a fresh salt, the Bloom. With
    `assigned` (the chain's assignment of that round), only results of the batch each trainer was given
    count: one accepted before we knew the round is checked here, before we attest it."""
    bitmap = bytearray(core.idl.constants["PARTICIPANT_BITMAP_LEN"])
    bloom = bytearray(core.idl.constants["BLOOM_BYTES"])
    salt = int.from_bytes(os.urandom(8), "little")  # picked after the commitments are fixed
    held = book.results if book else {}
    if assigned is not None and book is not None:
        held = {i: r for i, r in held.items() if assigned.get(i) is not None and assigned.get(i) == book.batches.get(i)}
    for index, (commitment, _) in sorted(held.items()):
        bitmap[index // 8] |= 1 << (index % 8)
        core.bloom_insert(bloom, salt, commitment)
    return bytes(bitmap), salt, bytes(bloom)


@dataclass(frozen=True)
class Consensus:
    """Which results of a step every honest replica applies, and which of them this client lacks."""

    accepted: dict[int, bytes]  # trainer index -> payload we hold that a quorum of witnesses attested
    missing: tuple[int, ...]  # trainers a quorum saw whose attested result we do not hold


def consensus(core: CoordinatorCore, run: Run, witnessed: RoundView, book: StepBook | None) -> Consensus:
    """Round `witnessed`'s witnesses decide the previous round's results: a trainer counts when at least a
    quorum list it, and its result is the commitment that at least a quorum of Blooms hold."""
    quorum = core.quorum(run.config.witness_nodes)
    held = book.results if book else {}
    accepted, missing = {}, []
    for index in range(len(run.clients)):
        seen = sum(w.saw(index) for w in witnessed.witnesses)
        if seen < quorum:
            continue
        mine = held.get(index)
        if mine is not None:
            votes = sum(core.bloom_contains(w.bloom, w.salt, mine[0]) for w in witnessed.witnesses)
            if votes >= quorum:
                accepted[index] = mine[1]
                continue
        missing.append(index)
    return Consensus(accepted, tuple(missing))


def unhealthy(core: CoordinatorCore, run: Run) -> list[int]:
    """Clients the chain would drop now: trained two rounds ago, seen by fewer than a quorum of the
    previous round's witnesses, and still healthy (the program's health rule)."""
    witnessed, trained = round_view(core, run, 1), round_view(core, run, 2)
    if witnessed is None or trained is None:
        return []
    quorum = core.quorum(run.config.witness_nodes)
    return [
        c.index for c in run.clients
        if c.healthy and trained.active(c.index)
        and sum(w.saw(c.index) for w in witnessed.witnesses) < quorum
    ]  # fmt: skip
