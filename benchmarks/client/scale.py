"""Protocol load as a run grows: 4, 16, 32 and 64 clients of the SYNTHETIC trainer (`cohort train
--synthetic`: real chain, P2P and transactions, payloads of the real model's size, no training) on one
localnet, every client its own process (forked from one that imported the client once: LocalRun's
fork_clients, so 64 clients fit in this machine's memory).

    .venv/bin/python benchmarks/client/scale.py [--clients 4,16,32,64] [--rounds 8] [--step-seconds 1.0]
        [--keep DIR]

Prints per run size, medians over the clients kept to the end and steady rounds: the round time, how many copies of its own
result a client served (holders re-serve what they checked: this stays a small constant), per-client
upload and download bytes per round (P2P; results themselves and everything else) and P2P requests (sent and
served: what a peer's CPU pays for, more than bytes) and connections dialled (each a handshake; ~0 once a run
has settled), per-client RPC requests and bytes
per round (the localnet counts what each connection asked and received), transactions per round, and each
client's memory (its proportional share of the pages it maps, shared ones included), and the CPU
seconds per round of a client and of the localnet (what N processes ask of the machine's cores). The
targets: per-client bytes and RPC load flat in N (apart from the results themselves, which every client
downloads once each), round time growing no faster than log N.

Every client handles every result: its announcement arrives and leaves over the overlay's push links (the
first two rings: degree <= 4; the other neighbours only exchange digests), the result is fetched once and
served about once, and each of those P2P requests costs ~1 ms of CPU over the iroh bindings, so a client's
CPU per round grows by ~10 ms per member (the CPU column: 0.33 s at 32 clients) and N clients sharing one
machine need ~N^2 x 10 ms a round. On 2 cores 32 clients need steps of ~10 s and 64 steps of ~30 s: there
64 clients kept all 64 to the end, every round applied all 64 results, at 0.92 s of CPU a client and round
(the machine's two cores ~90% busy), fetches ~8 s median, and its result served ~40 times by its trainer (it
serves 3 copies for its first 10 s, and on a saturated machine the first fetchers take longer than that to
re-serve). That works because a slow answer no longer drops a live connection (see the transport's
`stalled`); before, every timeout redialled, handshakes took most of the CPU and fetches timed out by the
thousand. Past what the cores carry, the round time measured here is CPU contention of N processes, not the
protocol; a client the run drops or that falls behind leaves, and the table counts the clients kept.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from cohort.client.runtime.local_run import LocalRun, write_config


async def measure(
    clients: int, rounds: int, step_seconds: float, keep: str | None
) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="cohort-scale-") as tmp:
        root = Path(keep) / str(clients) if keep else Path(tmp)  # --keep: the logs stay for reading
        root.mkdir(parents=True, exist_ok=True)
        batch = max(clients * 2, 24)
        config = write_config(root / "run.toml", global_batch_size_start=batch, global_batch_size_end=batch,
                              init_min_clients=clients, min_clients=max(2, clients // 2), epoch_time=3600,
                              max_round_train_time=max(60, int(6 * step_seconds)), warmup_time=300)  # fmt: skip
        extra = (
            "--synthetic",
            "--synthetic-seconds",
            str(step_seconds * clients / batch),
        )  # per sequence
        async with LocalRun(config=config, root=root, trainer_args=extra, fork_clients=True) as lr:
            trainers = await lr.start_members(clients)
            first = await lr.wait_for(
                lambda r: r.state.value == "RoundTrain", 600, "the first round"
            )
            skip = first.progress.step + 3
            # from here on the harness reads nothing from the RPC (it watches the clients' event files), so
            # the localnet's traffic is the clients' alone
            await wait_applied(trainers, skip, 300 + 12 * step_seconds)
            before, cpu_before = await lr.rpc_stats(), cpu_seconds(trainers, lr.localnet.pid)
            kept = await wait_applied(trainers, skip + rounds, (120 + 6 * step_seconds) * rounds)
            after, cpu_after = await lr.rpc_stats(), cpu_seconds(trainers, lr.localnet.pid)
            memory = [proportional_memory(t.process.pid) for t in kept if t.process is not None]
            elapsed_rounds = rounds
            stats = [
                [e for e in t.events("traffic") if skip <= e["step"] <= skip + rounds] for t in kept
            ]
            cpu = [cpu_after[0][i] - cpu_before[0][i] for i, t in enumerate(trainers) if t in kept]
    up = [s[-1]["sent"] - s[0]["sent"] for s in stats if len(s) > 1]
    down = [s[-1]["received"] - s[0]["received"] for s in stats if len(s) > 1]
    times = [s[-1]["t"] - s[0]["t"] for s in stats if len(s) > 1]
    requests = [s[-1]["requests"] - s[0]["requests"] for s in stats if len(s) > 1]
    dials = [s[-1].get("dials", 0) - s[0].get("dials", 0) for s in stats if len(s) > 1]
    per_round = statistics.median(times) / max(elapsed_rounds, 1)
    own = [e["own_uploads"] for s in stats for e in s if e.get("own_uploads") is not None]
    return {
        "kept": len(kept),
        "own_uploads": statistics.median(own) if own else 0.0,
        "own_uploads_max": max(own) if own else 0,
        "round": per_round,
        "up": statistics.median(up) / max(elapsed_rounds, 1),
        "down": statistics.median(down) / max(elapsed_rounds, 1),
        "requests": statistics.median(requests) / max(elapsed_rounds, 1),
        "dials": sum(dials)
        / max(len(dials), 1)
        / max(elapsed_rounds, 1),  # mean: they come in bursts
        "rpc_requests": (after["requests"] - before["requests"]) / clients / max(elapsed_rounds, 1),
        "rpc_bytes": (after["bytes_out"] - before["bytes_out"]) / clients / max(elapsed_rounds, 1),
        "transactions": (after["transactions"] - before["transactions"]) / max(elapsed_rounds, 1),
        "memory": statistics.median(m for m in memory if m) if any(memory) else 0.0,
        "cpu_client": statistics.median(cpu) / max(elapsed_rounds, 1),
        "cpu_localnet": (cpu_after[1] - cpu_before[1]) / max(elapsed_rounds, 1),
    }


async def wait_applied(trainers: list, step: int, timeout: float) -> list:
    """The trainers that applied `step`, once every one has or has left the run (a client the run drops,
    or that falls too far behind, leaves rather than diverge: on a machine short of cores, some do)."""
    until = time.monotonic() + timeout
    while True:
        applied = [t for t in trainers if any(e["step"] == step for e in t.events("applied"))]
        gone = [t for t in trainers if t.events("left_epoch") or t.events("exited")]
        if len(applied) + len([t for t in gone if t not in applied]) == len(trainers) and applied:
            return applied
        if time.monotonic() > until:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for step {step}: {len(applied)} of "
                               f"{len(trainers)} clients applied it, {len(gone)} left")  # fmt: skip
        await asyncio.sleep(0.5)


def cpu_seconds(trainers: list, localnet_pid: int) -> tuple[list[float], float]:
    """CPU seconds (user + system) used so far by each client, and by the localnet's process group (the
    validator and the RPC proxy it starts): what N processes ask of this machine's cores."""
    tick = os.sysconf("SC_CLK_TCK")
    per_pid: dict[int, tuple[int, float]] = {}  # pid -> (process group, seconds)
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        per_pid[int(stat.parent.name)] = (
            int(fields[2]),
            (int(fields[11]) + int(fields[12])) / tick,
        )
    clients = [
        per_pid.get(t.process.pid, (0, 0.0))[1] if t.process is not None else 0.0 for t in trainers
    ]
    localnet = sum(seconds for group, seconds in per_pid.values() if group == localnet_pid)
    return clients, localnet


def proportional_memory(pid: int) -> float:
    """A process's proportional set size in bytes (pages shared by k processes count 1/k), 0 if unknown."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0.0


async def main(args: argparse.Namespace) -> None:
    table = Table(
        title=f"synthetic clients, {args.step_seconds:g} s per step, {args.rounds} steady rounds"
    )
    for column in ("clients", "kept to the end", "round (s)", "copies of own result served (median, max)", "upload / client / round",
                   "download / client / round", "P2P requests / client / round",
                   "connections dialled / client / round",
                   "RPC requests / client / round", "RPC bytes / client / round", "transactions / round",
                   "memory / client", "CPU s / client / round", "CPU s / round, localnet"):  # fmt: skip
        table.add_column(column, justify="right")
    console, failed = Console(width=200), []
    for n in [int(x) for x in args.clients.split(",")]:
        try:
            f = await measure(n, args.rounds, args.step_seconds, args.keep)
        except TimeoutError as e:  # a size this machine cannot carry: say why, keep the other rows
            failed.append(f"{n} clients: {str(e)[:300]}")
            table.add_row(str(n), *["did not finish"] + [""] * 12)
            continue
        console.print(f"{n} clients: {f}")  # as it comes: a later size may take long or fail
        table.add_row(str(n), str(f["kept"]), f"{f['round']:.2f}", f"{f['own_uploads']:.0f}, {f['own_uploads_max']}",
                      f"{f['up']:,.0f} B", f"{f['down']:,.0f} B", f"{f['requests']:.0f}", f"{f['dials']:.1f}",
                      f"{f['rpc_requests']:.1f}", f"{f['rpc_bytes']:,.0f} B", f"{f['transactions']:.1f}", f"{f['memory'] / 2**20:.0f} MB",
                      f"{f['cpu_client']:.2f}", f"{f['cpu_localnet']:.2f}")  # fmt: skip
    console.print(table)
    for line in failed:
        console.print(line)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", default="4,16,32")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--step-seconds", type=float, default=1.0)
    parser.add_argument(
        "--keep", help="a directory to run in and keep (events and logs of every client)"
    )
    asyncio.run(main(parser.parse_args()))
