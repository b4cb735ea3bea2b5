"""Fixtures of the explorer tests: an in-process localnet with the coordinator deployed over RPC, runs
created from the example config, and scripted epochs with witnesses that report real-looking metrics."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from support.scripted_run import play_epoch

from cohort.localnet.config import LocalnetConfig
from cohort.localnet.server import Localnet
from cohort.sbf import build
from cohort.sdk.client import RunClient
from cohort.sdk.coordinator_core import CoordinatorCore, load_idl
from cohort.sdk.deploy import deploy_program
from cohort.sdk.explorer import Explorer
from cohort.sdk.rpc import Rpc
from cohort.sdk.run_config import RunFile, load_run_file, packaged_config

EXAMPLE = packaged_config("example-run.toml")
ARTIFACTS = Path(__file__).resolve().parents[2] / "build" / "test-artifacts" / "explorer"


def metrics(step: int, index: int) -> dict:
    """What a witness reports: a loss falling with the step, throughput and traffic varying by client."""
    return {"loss": round(5.0 / (1 + 0.1 * step) + 0.01 * index, 4),
            "tokens_per_sec": 1000.0 + 10 * step + index, "bytes_sent": 1_000_000 + step * 1000,
            "bytes_received": 2_000_000 + step * 1000, "eval_loss": 0.0, "eval_tokens": 0}  # fmt: skip


@dataclass
class Chain:
    net: Localnet
    rpc: Rpc
    core: CoordinatorCore
    authority: Keypair
    program_id: Pubkey
    program_keypair: Path
    elf: bytes
    client: RunClient
    metrics = staticmethod(metrics)

    @staticmethod
    async def caught_up(ex: Explorer, runs: int = 1) -> None:
        """Wait (30 s at most) until the explorer has caught up with the chain and lists `runs` runs."""
        deadline = time.monotonic() + 30
        while not (ex.indexer.status.caught_up and len(ex.store.runs()) >= runs):
            assert time.monotonic() < deadline, "the explorer did not catch up"
            await asyncio.sleep(0.05)

    def explorer(self, db: Path, *, live: bool = True, **options) -> Explorer:
        """An explorer of this chain's coordinator on a free port, its index in `db`; `live`: follow the
        websocket too (else it polls only)."""
        return Explorer(self.net.http_url, self.net.ws_url if live else None, self.program_id, db,
                        port=0, core=self.core, **options)  # fmt: skip

    async def create_run(
        self,
        run_id: str,
        client: RunClient | None = None,
        config: dict | None = None,
        **metadata: str,
    ) -> RunFile:
        """A run from the example config with another id (and metadata fields, `config` fields replaced)."""
        run_file = load_run_file(EXAMPLE, self.core)
        run_file = dataclasses.replace(
            run_file,
            run_id=run_id,
            metadata=dataclasses.replace(run_file.metadata, **metadata),
            config=dataclasses.replace(run_file.config, **(config or {})),
        )
        await (client or self.client).create_run(self.authority, run_file)
        return run_file

    async def members(self, n: int = 3) -> list[Keypair]:
        wallets = [Keypair() for _ in range(n)]
        for w in wallets:
            await self.rpc.airdrop(w.pubkey(), 10**9)
        return wallets

    async def play(
        self, run_id: str, members: list[Keypair], client: RunClient | None = None
    ) -> None:
        await play_epoch(client or self.client, run_id, members, metadata=metrics)

    async def deploy(self, keypair: Path) -> Pubkey:
        """Deploy (or upgrade, when the keypair's program exists) the coordinator."""
        result = await deploy_program(self.rpc, self.authority, self.elf, keypair)
        return result.program_id

    async def expected_events(self, program: Pubkey) -> list[tuple[str, str]]:
        """(signature, event name) of every event in the program's successful transactions, oldest first,
        read straight from the RPC with the SDK's own log decoder."""
        out: list[tuple[str, str]] = []
        signatures = await self.rpc.raw_request(
            "getSignaturesForAddress", [str(program), {"limit": 1000}]
        )
        for s in reversed(signatures):
            if s["err"] is not None:
                continue
            tx = await self.rpc.raw_request(
                "getTransaction", [s["signature"], {"encoding": "json"}]
            )
            logs = tx["meta"]["logMessages"] or []
            out += [
                (s["signature"], name) for name, _ in self.core.idl.events_in_logs(logs, program)
            ]
        return out


@pytest.fixture(scope="session")
def coordinator_elf() -> bytes:
    (program,) = build.build_all(["coordinator"], log=lambda _: None)
    return program.so_path.read_bytes()


@pytest.fixture(scope="session")
def core(coordinator_elf) -> CoordinatorCore:
    return CoordinatorCore(idl=load_idl())


@pytest.fixture
async def chain(tmp_path, core, coordinator_elf) -> AsyncIterator[Chain]:
    async with (
        Localnet(LocalnetConfig(port=0, cheats=True)) as net,
        Rpc(net.http_url, idl=core.idl) as rpc,
    ):
        authority = Keypair()
        await rpc.airdrop(authority.pubkey(), 1000 * 10**9)
        keypair = tmp_path / "coordinator-keypair.json"
        result = await deploy_program(rpc, authority, coordinator_elf, keypair)
        client = RunClient(rpc, result.program_id, ws_url=net.ws_url, idl=core.idl)
        yield Chain(net, rpc, core, authority, result.program_id, keypair, coordinator_elf, client)
