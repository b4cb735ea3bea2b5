"""What the round seed's pending step adds to every round, on the localnet over real RPC.

The witness whose record gives a results root a strict majority of the seats decides the step and ends
the round: the next round's inputs freeze in its slot S, and that round starts with the first instruction
in a later slot (its successor's seed comes from the hash of S). Measured per round: slots from the
deciding witness to the starting tick, and the wall time from the deciding witness's confirmation to the
starting tick's, next to a witness's own send-and-confirm time.
Run: .venv/bin/python benchmarks/coordinator/round_latency.py
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from solders.keypair import Keypair

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

from support.scripted_run import start_epoch, witness_args

from cohort.localnet.config import LocalnetConfig
from cohort.localnet.server import Localnet
from cohort.sbf import build
from cohort.sdk.client import RunClient
from cohort.sdk.coordinator_core import CoordinatorCore
from cohort.sdk.deploy import deploy_program
from cohort.sdk.predict import elected_witnesses
from cohort.sdk.rpc import Rpc
from cohort.sdk.run_config import load_run_file, packaged_config

ROUNDS = 20
CONFIG = packaged_config("example-run.toml")


async def slot_of(rpc: Rpc, signature) -> int:
    statuses = await rpc.call(
        "getSignatureStatuses", lambda c: c.get_signature_statuses([signature])
    )
    return statuses.value[0].slot


async def measure() -> tuple[list[int], list[float], list[float], int]:
    (program,) = build.build_all(["coordinator"], log=lambda _: None)
    core = CoordinatorCore()
    async with (
        Localnet(LocalnetConfig(port=0, cheats=True)) as net,
        Rpc(net.http_url, idl=core.idl) as rpc,
    ):
        authority = Keypair()
        await rpc.airdrop(authority.pubkey(), 100 * 10**9)
        with tempfile.TemporaryDirectory() as keys:
            deployed = await deploy_program(
                rpc, authority, program.so_path.read_bytes(), Path(keys) / "c.json"
            )
        client = RunClient(rpc, deployed.program_id, idl=core.idl)
        run_file = load_run_file(CONFIG, core)
        await client.create_run(authority, run_file)
        members = [Keypair() for _ in range(run_file.config.init_min_clients)]
        await asyncio.gather(*(rpc.airdrop(m.pubkey(), 10**9) for m in members))
        by_signer = {m.pubkey(): m for m in members}
        run = await start_epoch(client, run_file.run_id, members)
        slots, added, witness_alone = [], [], []
        for _ in range(ROUNDS):
            seats = list(elected_witnesses(core, run).items())[
                : core.quorum(run.config.witness_nodes)
            ]
            for index, position in seats[:-1]:
                await client.witness(
                    by_signer[run.clients[index].signer],
                    run.address,
                    witness_args(run, index, position),
                )
            index, position = seats[-1]
            sent = time.perf_counter()
            decided = await client.witness(by_signer[run.clients[index].signer], run.address,
                                           witness_args(run, index, position))  # fmt: skip
            frozen = time.perf_counter()
            start = await client.start_pending_round(members[0], run_file.run_id, retry_delay=0.01)
            started = time.perf_counter()
            slots.append(await slot_of(rpc, start) - await slot_of(rpc, decided))
            witness_alone.append(frozen - sent)
            added.append(started - frozen)
            run = await client.fetch_run(run_file.run_id)
        return slots, added, witness_alone, net.config.slot_ms


def main() -> None:
    slots, added, witness_alone, slot_ms = asyncio.run(measure())
    print(f"{ROUNDS} rounds on the localnet ({slot_ms} ms slots)")
    print(
        f"slots from the deciding witness to the round's start: median {statistics.median(slots)}, max {max(slots)}"
    )
    print(f"added wall time per round: median {statistics.median(added) * 1000:.0f} ms, "
          f"max {max(added) * 1000:.0f} ms")  # fmt: skip
    print(
        f"(one witness sent and confirmed: median {statistics.median(witness_alone) * 1000:.0f} ms)"
    )


if __name__ == "__main__":
    main()
