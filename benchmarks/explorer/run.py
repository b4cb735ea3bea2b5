"""The explorer's figures: the indexer's backfill rate (events/s) and the load time of a run page whose
run has 10k witness events, in Debian's chromium (headless, through playwright).

    .venv/bin/python benchmarks/explorer/run.py [--witnesses 10000] [--loads 5]

A run with 16 clients and 16 witnesses per round plays rounds on an in-process localnet (real signed
transactions over RPC, chain time warped) until it holds the wanted number of WitnessSubmitted events.
Then a fresh database backfills everything (getSignaturesForAddress + getTransaction over RPC, decode,
SQLite), and the run page is opened repeatedly until its loss chart is drawn.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

from solders.keypair import Keypair
from support.scripted_run import start_epoch, submit_witnesses, warp

from cohort.localnet.config import LocalnetConfig
from cohort.localnet.server import Localnet
from cohort.sbf import build
from cohort.sdk.client import RunClient
from cohort.sdk.coordinator_core import CoordinatorCore
from cohort.sdk.deploy import deploy_program
from cohort.sdk.explorer import Explorer
from cohort.sdk.explorer.indexer import Indexer
from cohort.sdk.explorer.store import Store
from cohort.sdk.models import RunState
from cohort.sdk.rpc import Rpc
from cohort.sdk.run_config import load_run_file, packaged_config

EXAMPLE = packaged_config("example-run.toml")
CLIENTS = 16


def metrics(step: int, index: int) -> dict:
    return {"loss": 5.0 / (1 + 0.01 * step) + 0.001 * index, "tokens_per_sec": 1500.0 + index,
            "bytes_sent": 3_000_000 + step, "bytes_received": 6_000_000 + step, "eval_loss": 0.0, "eval_tokens": 0}  # fmt: skip


async def play_rounds(
    client: RunClient, run_id: str, members: list[Keypair], witnesses: int
) -> int:
    """Rounds of one long epoch until `witnesses` witness events are on chain; returns the count."""
    run = await start_epoch(client, run_id, members)
    sent = 0
    while sent < witnesses:
        assert run.state == RunState.RoundTrain, run.state
        before = len(run.current_round.witnesses)
        await submit_witnesses(client, run, members, metrics)
        run = await client.fetch_run(run_id)
        sent += run.config.witness_nodes - before
        await warp(client, run.config.round_witness_time)
        await client.tick(members[0], run_id)
        await client.start_pending_round(members[0], run_id)  # the next round's seed: a slot later
        run = await client.fetch_run(run_id)
        if run.progress.step % 50 == 0:
            print(f"  step {run.progress.step}: {sent} witness events", flush=True)
    return sent


async def page_loads(url: str, loads: int) -> list[float]:
    from playwright.async_api import async_playwright

    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            times = []
            # bypass_csp only lets playwright evaluate its wait predicate; the page itself is unchanged
            context = await browser.new_context(
                viewport={"width": 1280, "height": 1000}, bypass_csp=True
            )
            for _ in range(loads):
                page = await context.new_page()
                started = time.perf_counter()
                await page.goto(url)
                await page.wait_for_function(
                    "document.body.dataset.loaded && document.getElementById('loss-chart').dataset.points"
                )
                times.append(time.perf_counter() - started)
                points = await page.locator("#loss-chart").get_attribute("data-points")
                await page.close()
            print(f"  loss chart points drawn: {points}")
            return times
        finally:
            await browser.close()


async def main(witnesses: int, loads: int) -> None:
    (program,) = build.build_all(["coordinator"], log=lambda _: None)
    core = CoordinatorCore()
    async with (
        Localnet(
            LocalnetConfig(port=0, cheats=True, slot_ms=50)
        ) as net,  # short slots: seeds come sooner
        Rpc(net.http_url, idl=core.idl) as rpc,
    ):
        authority = Keypair()
        await rpc.airdrop(authority.pubkey(), 1000 * 10**9)
        with tempfile.TemporaryDirectory() as folder:
            folder_path = Path(folder)
            deployed = await deploy_program(
                rpc, authority, program.so_path.read_bytes(), folder_path / "coordinator.json"
            )
            client = RunClient(rpc, deployed.program_id, ws_url=net.ws_url, idl=core.idl)
            run_file = load_run_file(EXAMPLE, core)
            config = dataclasses.replace(
                run_file.config, init_min_clients=CLIENTS, min_clients=CLIENTS, witness_nodes=CLIENTS,
                global_batch_size_start=CLIENTS, global_batch_size_end=2 * CLIENTS,
                epoch_time=10**7, total_steps=max(2000, witnesses // CLIENTS + 10),
            )  # fmt: skip
            run_file = dataclasses.replace(run_file, run_id="bench", config=config)
            await client.create_run(authority, run_file)
            members = [Keypair() for _ in range(CLIENTS)]
            await asyncio.gather(*(rpc.airdrop(m.pubkey(), 10 * 10**9) for m in members))
            print(f"playing rounds until {witnesses} witness events are on chain ...", flush=True)
            started = time.perf_counter()
            sent = await play_rounds(client, "bench", members, witnesses)
            print(f"  {sent} witness events in {time.perf_counter() - started:.1f} s")

            store = Store(folder_path / "explorer.sqlite")
            indexer = Indexer(store, rpc, [deployed.program_id], core=core)
            started = time.perf_counter()
            transactions = await indexer.catch_up()
            seconds = time.perf_counter() - started
            counts = store.counts()
            store.close()
            print(f"backfill: {transactions} transactions, {counts['events']} events "
                  f"({counts['witnesses']} witness) in {seconds:.2f} s = "
                  f"{counts['events'] / seconds:,.0f} events/s, {transactions / seconds:,.0f} tx/s")  # fmt: skip

            async with Explorer(net.http_url, net.ws_url, deployed.program_id,
                                folder_path / "explorer.sqlite", port=0, core=core) as ex:  # fmt: skip
                times = await page_loads(ex.url + "/runs/bench", loads)
            print(f"run page with {counts['witnesses']} witness events: load to drawn chart "
                  f"median {statistics.median(times) * 1000:.0f} ms, "
                  f"min {min(times) * 1000:.0f} ms, max {max(times) * 1000:.0f} ms ({loads} loads)")  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--witnesses", type=int, default=10_000)
    parser.add_argument("--loads", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(main(args.witnesses, args.loads))
