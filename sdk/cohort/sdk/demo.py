"""`cohort demo`: the end-to-end walk through what exists, on one machine with no network.

Start an in-process localnet, deploy the coordinator over RPC, create a run from configs/example-run.toml,
join a few wallets and play one short epoch the way clients will (ticks, warmup witnesses, elected
witnesses; chain time moved with the localnet's warpTime instead of waiting), then show `run status`.
There is no training yet: witnesses report zero loss and throughput.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from solders.keypair import Keypair

from .client import RunClient
from .coordinator_core import CoordinatorCore
from .models import RunState
from .predict import elected_witnesses

EXAMPLE_CONFIG = Path(__file__).resolve().parents[3] / "configs" / "example-run.toml"
_BLOOM = b"\x01" * 512  # stands in for the Bloom filter of received results until clients train


async def warp(client: RunClient, seconds: int) -> None:
    """Move the localnet's clock forward (its `localnet_warpTime` cheat method)."""
    await client.rpc.raw_request("localnet_warpTime", [seconds])


async def play_epoch(
    client: RunClient,
    run_id: str,
    members: list[Keypair],
    log: Callable[[str], None] = lambda _: None,
) -> list[RunState]:
    """Join `members` and play one epoch through to the next WaitingForMembers: the epoch is made to time
    out during its first round, so it ends after the two flush rounds. Returns the phases passed through."""
    phases: list[RunState] = []

    async def state():
        s = await client.fetch_run(run_id)
        if not phases or phases[-1] != s.state:
            phases.append(s.state)
            log(f"{s.state} (epoch {s.progress.epoch}, step {s.progress.step})")
        return s

    run = await state()
    config = run.config
    for wallet in members:
        await client.join_run(wallet, run_id, Keypair())
    await warp(client, config.waiting_for_members_extra_time)
    await client.tick(members[0], run_id)
    run = await state()
    by_signer = {bytes(m.pubkey()): m for m in members}
    for c in run.clients[: config.witness_nodes]:
        await client.warmup_witness(by_signer[bytes(c.signer)], run_id, c.index)
    await client.start_pending_round(members[0], run_id)  # the first round starts a slot later
    run = await state()
    await warp(client, config.epoch_time)  # the epoch times out: two flush rounds follow this one
    core = CoordinatorCore(idl=client.idl)
    while run.state == RunState.RoundTrain:
        for index, position in elected_witnesses(core, run).items():
            signer = by_signer[bytes(run.clients[index].signer)]
            args = {"step": run.progress.step, "index": index, "position": position,
                    "participants": run.current_round.active_mask, "bloom_salt": 1,
                    "broadcast_bloom": _BLOOM,
                    "metadata": {"loss": 0.0, "tokens_per_sec": 0.0, "bytes_sent": 0, "bytes_received": 0}}  # fmt: skip
            await client.witness(signer, run_id, args)
        run = await state()  # all elected witnesses reported: RoundWitness at once
        await warp(client, config.round_witness_time)
        await client.tick(members[0], run_id)
        await client.start_pending_round(members[0], run_id)
        run = await state()
    await warp(client, config.cooldown_time)
    await client.tick(members[0], run_id)
    await state()
    return phases


async def _demo(console: Console) -> None:
    from cohort.localnet.config import LocalnetConfig
    from cohort.localnet.server import Localnet
    from cohort.sbf import build

    from .deploy import deploy_program
    from .rpc import Rpc
    from .run_config import load_run_file
    from .status import latest_loss, render, summarize

    console.print("[bold]1.[/] build the coordinator (C → SBF) and its host library")
    (program,) = build.build_all(["coordinator"], log=lambda line: console.print(f"   {line}"))
    core = CoordinatorCore()
    async with Localnet(LocalnetConfig(port=0, cheats=True)) as net, Rpc(net.http_url, idl=core.idl) as rpc:
        console.print(
            f"[bold]2.[/] localnet at {net.http_url}; deploy over RPC (loader-v3 transactions)"
        )
        authority = Keypair()
        await rpc.airdrop(authority.pubkey(), 100 * 10**9)
        with tempfile.TemporaryDirectory() as keys:
            result = await deploy_program(
                rpc, authority, program.so_path.read_bytes(), Path(keys) / "coordinator.json"
            )
        console.print(f"   program {result.program_id}: {result.elf_size} bytes, "
                      f"{result.writes_sent} concurrent writes, {result.seconds:.2f} s")  # fmt: skip
        client = RunClient(rpc, result.program_id, ws_url=net.ws_url, idl=core.idl)

        run_file = load_run_file(EXAMPLE_CONFIG, core)
        console.print(f"[bold]3.[/] create run {run_file.run_id!r} from {EXAMPLE_CONFIG.name}")
        await client.create_run(authority, run_file)
        members = [Keypair() for _ in range(run_file.config.init_min_clients)]
        await asyncio.gather(*(rpc.airdrop(m.pubkey(), 10**9) for m in members))

        console.print(f"[bold]4.[/] {len(members)} wallets join and play one short epoch "
                      "(no training yet; chain time warped)")  # fmt: skip
        await play_epoch(client, run_file.run_id, members, lambda line: console.print(f"   {line}"))

        console.print("[bold]5.[/] cohort run status")
        state = await client.fetch_run(run_file.run_id)
        loss = latest_loss(core.idl, await rpc.recent_logs(state.address))
        render(summarize(state, core, await rpc.unix_time(), loss), console)
    console.print("[green]done.[/] Next: `cohort --help`.")


def run(console: Console | None = None) -> None:
    console = console or Console()
    console.rule("[bold]cohort demo")
    asyncio.run(_demo(console))
