"""A scripted epoch: wallets play one short epoch by hand (ticks, warmup witnesses, seated witnesses) with
chain time moved by the localnet's warpTime cheat instead of waiting. Tests use it to drive a run through every
phase without training clients."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from solders.keypair import Keypair

from cohort.sdk.client import RunClient
from cohort.sdk.coordinator_core import CoordinatorCore
from cohort.sdk.models import Run, RunState
from cohort.sdk.predict import elected_witnesses
from cohort.sdk.rpc import Rpc
from cohort.sdk.run_config import RunFile

ROOT = b"\x01" * 32  # stands in for the results root the seated witnesses agree on


async def warp(client: RunClient, seconds: int) -> None:
    """Move the localnet's clock forward (its `localnet_warpTime` cheat method)."""
    await client.rpc.raw_request("localnet_warpTime", [seconds])


@contextlib.asynccontextmanager
async def funded_run(workspace: Any, core: CoordinatorCore, run_file: RunFile) -> AsyncIterator[
        tuple[Rpc, RunClient, list[Keypair]]]:  # fmt: skip
    """The workspace's localnet: its RPC, a RunClient of its program, `run_file`'s run created and opened
    by the workspace wallet, and init_min_clients new wallets funded with 1 SOL each."""
    net = workspace.localnet.net
    async with Rpc(net.http_url, idl=core.idl) as rpc:
        client = RunClient(rpc, workspace.program_id, ws_url=net.ws_url, idl=core.idl)
        await client.create_run(workspace.wallet, run_file)
        members = [Keypair() for _ in range(run_file.config.init_min_clients)]
        for m in members:
            await rpc.airdrop(m.pubkey(), 10**9)
        yield rpc, client, members


Metadata = Callable[[int, int], dict]  # (step, epoch client index) -> a witness's WitnessMetadata


def zero_metadata(step: int, index: int) -> dict:
    return {
        "loss": 0.0,
        "tokens_per_sec": 0.0,
        "bytes_sent": 0,
        "bytes_received": 0,
        "eval_loss": 0.0,
        "eval_tokens": 0,
    }


async def start_epoch(
    client: RunClient,
    run_id: str,
    members: list[Keypair],
    state: Callable[[], Awaitable[Run]] | None = None,
    node_keys: list[Keypair] | None = None,
) -> Run:
    """Join `members`, let WaitingForMembers end and the first witness_nodes members warm up: the run is then
    in the epoch's first RoundTrain."""
    state = state or (lambda: client.fetch_run(run_id))
    run = await state()
    config = run.config
    for k, wallet in enumerate(members):
        await client.join_run(wallet, run_id, node_keys[k] if node_keys else Keypair())
    run = await state()
    if (
        run.state == RunState.WaitingForMembers
    ):  # a join after the wait ran out starts the epoch itself
        await warp(client, config.waiting_for_members_extra_time)
        await client.tick(members[0], run_id)
        run = await state()
    by_signer = {bytes(m.pubkey()): m for m in members}
    for c in run.clients[: config.witness_nodes]:
        await client.warmup_witness(by_signer[bytes(c.signer)], run_id, c.index)
    await client.start_pending_round(members[0], run_id)
    return await state()


def witness_args(run: Run, index: int, position: int, metadata: Metadata = zero_metadata) -> dict:
    """A seat's witness record for the run's current round: everyone's result held, one results root."""
    return {"step": run.progress.step, "index": index, "position": position,
            "participants": run.current_round.active_mask, "results_root": ROOT, "weights_digest": 1,
            "metadata": metadata(run.progress.step, index)}  # fmt: skip


async def submit_witnesses(
    client: RunClient, run: Run, members: list[Keypair], metadata: Metadata = zero_metadata
) -> None:
    """Seated witnesses of the run's current round report one results root, with `metadata(step, index)`,
    until a strict majority of the seats holds it: that decides the step and ends the round."""
    core = CoordinatorCore(idl=client.idl)
    by_signer = {bytes(m.pubkey()): m for m in members}
    seats = list(elected_witnesses(core, run).items())[: core.quorum(run.config.witness_nodes)]
    for index, position in seats:
        signer = by_signer[bytes(run.clients[index].signer)]
        await client.witness(signer, run.address, witness_args(run, index, position, metadata))


async def play_epoch(
    client: RunClient,
    run_id: str,
    members: list[Keypair],
    log: Callable[[str], None] = lambda _: None,
    metadata: Metadata = zero_metadata,
    node_keys: list[Keypair] | None = None,
) -> list[RunState]:
    """Join `members` and play one epoch through to the next WaitingForMembers: the epoch is made to time
    out during its first round, so it ends after the one flush round. Returns the phases passed through."""
    phases: list[RunState] = []

    async def state():
        s = await client.fetch_run(run_id)
        if not phases or phases[-1] != s.state:
            phases.append(s.state)
            log(f"{s.state} (epoch {s.progress.epoch}, step {s.progress.step})")
        return s

    run = await start_epoch(client, run_id, members, state, node_keys)
    config = run.config
    await warp(client, config.epoch_time)  # the epoch times out: one flush round follows this one
    while run.state == RunState.RoundTrain:
        await submit_witnesses(client, run, members, metadata)
        run = (
            await state()
        )  # the majority decided the step: the next round started (or waits for its
        # seed, in the slot this one began in), or Cooldown
        await client.start_pending_round(members[0], run_id)
        run = await state()
    await warp(client, config.cooldown_time)
    await client.tick(members[0], run_id)
    await state()
    return phases


Stage = Callable[[str, dict[str, Any]], Awaitable[None]]


async def _no_stage(stage: str, facts: dict[str, Any]) -> None:
    pass


async def convict_by_checks(
    client: RunClient, run_id: str, members: list[Keypair], at: Stage = _no_stage
) -> dict[str, Any]:
    """In a run with verification_percent = 100 and three members in its first round (start_epoch): play
    rounds until step start_step's checks are drawn, then its two verifiers fail trainer 0's check (a
    dispute opens) and, once its committee is drawn, convict it. `at(stage, facts)` runs after each stage:
    "reported" (one failure of two), "disputed" (the dispute is open), "convicted". Returns the facts: step,
    trainer, verifiers (epoch indices), wallets (epoch index -> Keypair)."""
    core = CoordinatorCore(idl=client.idl)
    run = await client.fetch_run(run_id)
    for _ in range(
        3
    ):  # the round of height 3 reveals the seed of height 4: the first step's checks
        await submit_witnesses(client, run, members)
        await client.start_pending_round(members[0], run_id)
        run = await client.fetch_run(run_id)
    step, trainer = run.start_step, 0
    seed = run.check_seed(step)
    assert seed is not None
    verifiers = core.check_plan(run.data[8:], step, seed, trainer)
    assert len(verifiers) == 2, verifiers
    wallets = {c.index: next(m for m in members if m.pubkey() == c.signer) for c in run.clients}
    facts = {"step": step, "trainer": trainer, "verifiers": verifiers, "wallets": wallets}
    first, second = wallets[verifiers[0]], wallets[verifiers[1]]
    await client.report_check(first, run_id, step, trainer, "PayloadMismatch")
    await at("reported", facts)
    await client.report_check(second, run_id, step, trainer, "StateNotDelivered")
    await at("disputed", facts)
    for _ in range(2):  # the committee's seed: DISPUTE_SEED_LAG rounds after the one it opened in
        run = await client.fetch_run(run_id)
        await submit_witnesses(client, run, members)
        await client.start_pending_round(members[0], run_id)
    await client.report_check(first, run_id, step, trainer, "PayloadMismatch")
    await client.report_check(second, run_id, step, trainer, "StateMismatch")
    await at("convicted", facts)
    return facts
