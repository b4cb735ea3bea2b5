"""A whole run on one machine, from real parts: a localnet process, the coordinator deployed over RPC,
a run created from a config file, and N `cohort train` processes with their own wallets and P2P nodes.

Used by `cohort demo`, the client tests and the client benchmark. Every process gets its own process
group and is stopped (SIGTERM, then SIGKILL) when the context exits; every wait is bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from solders.keypair import Keypair
from solders.pubkey import Pubkey

from cohort.sdk.client import RunClient
from cohort.sdk.coordinator_core import CoordinatorCore
from cohort.sdk.deploy import deploy_program
from cohort.sdk.models import Run
from cohort.sdk.rpc import Rpc
from cohort.sdk.run_config import RunFile, load_run_file, packaged_config
from cohort.sdk.wallet import save_keypair

from .zygote import ForkedProcess, Zygote

DEMO_CONFIG = packaged_config(
    "demo-run.toml"
)  # ships with the package: the demo works from a wheel


def write_config(path: Path, base: Path = DEMO_CONFIG, **values: object) -> Path:
    """A copy of the `base` run config with some `key = value` lines changed. A key must occur once, or be
    named `table__key` (e.g. `lr_schedule__kind`) to pick it in the table whose header ends with `table]`."""
    text = base.read_text()
    for name, value in values.items():
        table, _, key = name.rpartition("__")
        if isinstance(value, bool):
            literal = str(value).lower()
        elif isinstance(value, str):
            literal = '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
        else:
            literal = str(value)
        start, stop = 0, len(text)
        if table:
            header = re.search(rf"^\[(?:[\w.]+\.)?{table}\]", text, re.M)
            if header is None:
                raise ValueError(f"{base.name} has no [{table}] table")
            start = header.end()
            following = re.compile(r"^\[", re.M).search(text, start)
            stop = following.start() if following else len(text)
        pattern = re.compile(rf"^{key} = [^#\n]*", re.M)
        found = pattern.findall(text, start, stop)
        if len(found) != 1:
            raise ValueError(
                f"{name} is not a key that occurs once in {base.name} (name its table: TABLE__KEY)"
            )
        text = (
            text[:start]
            + pattern.sub(f"{key} = {literal}  ", text[start:stop], count=1)
            + text[stop:]
        )
    path.write_text(text)
    return path


def recent_events(trainer: TrainerProcess, count: int = 12) -> str:
    """A trainer's last `count` events, short: what a timed-out wait says about where it stood. The chain
    state it followed (several events a round) is left out: it would crowd out what the client did."""
    shown = []
    for e in [e for e in trainer.events() if e["event"] not in ("state", "traffic")][-count:]:
        fields = {
            k: v for k, v in e.items() if k not in ("t", "event") and not isinstance(v, list | dict)
        }
        shown.append(f"{e.get('event')} {fields}"[:160])
    return " | ".join(shown)


def free_port_pair() -> int:
    """A port p with p and p + 1 free on 127.0.0.1 (JSON-RPC and websocket)."""
    for _ in range(200):
        with socket.socket() as a:
            a.bind(("127.0.0.1", 0))
            port = a.getsockname()[1]
            if port >= 65535:
                continue
            with socket.socket() as b:
                try:
                    b.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
            return port
    raise RuntimeError("no free pair of adjacent ports on 127.0.0.1")


STACK_DUMP_WAIT = (
    1.0  # seconds a process that did not stop is given to write its stacks before SIGKILL
)


def stop_process(process: subprocess.Popen | ForkedProcess, grace: float = 10.0) -> None:
    """SIGTERM the process group, SIGKILL it after `grace` seconds."""
    stop_processes([process], grace)


def stop_processes(processes: list[subprocess.Popen | ForkedProcess], grace: float = 10.0) -> None:
    """SIGTERM every process group at once, then SIGKILL those still running `grace` seconds later: each
    leaves on its own (a trainer sends its exit_run), and one after another many would take minutes."""
    running = [p for p in processes if p.poll() is None]
    for process in running:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for process in running:
        try:
            process.wait(max(deadline - time.monotonic(), 0.01))
        except subprocess.TimeoutExpired:
            # one that did not leave is stuck: a client writes its threads' stacks to its log on SIGUSR1
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGUSR1)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(STACK_DUMP_WAIT)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)


FAILURE_EVENTS = (
    "left_epoch",
    "task_failed",
    "bad_result",
    "train_failed",
    "follower_restarted",
    "replica_drift",
)


def failures(trainer: TrainerProcess) -> list[str]:
    """What went wrong in a trainer that should not in a fault-free run: failure events, and tracebacks
    in its output."""
    found = [f"{e['event']}: {e}" for e in trainer.events() if e["event"] in FAILURE_EVENTS]
    if trainer.log_path.exists() and "Traceback" in trainer.log_path.read_text(errors="replace"):
        found.append("traceback in " + trainer.log_path.name)
    return found


def read_events(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(ValueError):
            out.append(json.loads(line))
    return out


@dataclass
class TrainerProcess:
    """One `cohort train` process, its wallet and its files."""

    name: str
    wallet: Keypair
    wallet_path: Path
    events_path: Path
    log_path: Path
    process: subprocess.Popen | ForkedProcess | None = None

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        return [e for e in read_events(self.events_path) if kind is None or e["event"] == kind]

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None


class Placement(Protocol):
    """Where processes run: a named node's argv prefix and address (e.g. a WAN test bed's namespaces,
    tests/support/wan). The localnet runs on node "rpc", each trainer on the node named like it."""

    def prefix(self, name: str) -> list[str]: ...

    def address(self, name: str) -> str: ...


RPC_NODE = "rpc"
NODE_PORT = 8899  # with a placement every node has its own ports: a fixed one is free


@dataclass
class LocalRun:
    """Localnet + deployed coordinator + one run; `start_trainer` adds clients. With a `placement` every
    process runs on its own node (behind emulated links) and binds that node's address; without one
    everything binds 127.0.0.1."""

    config: Path = DEMO_CONFIG
    root: Path | None = None
    checkpointers: int = 0  # the first N trainers' wallets become the run's checkpointers
    trainer_args: tuple[str, ...] = ()
    env: dict[str, str] = field(
        default_factory=dict
    )  # extra environment of every trainer (e.g. a shared HOME)
    placement: Placement | None = None
    log: Callable[[str], None] = lambda _: None
    trainers: list[TrainerProcess] = field(default_factory=list)
    # `cohort train` processes forked from one that imported the client once (zygote.py): many clients in
    # the memory of few; not with a placement (its processes start inside other network namespaces)
    fork_clients: bool = False

    async def __aenter__(self) -> LocalRun:
        self._tmp = None
        if self.root is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="cohort-run-")
            self.root = Path(self._tmp.name)
        self.root.mkdir(parents=True, exist_ok=True)
        if self.fork_clients and self.placement is not None:
            raise ValueError(
                "fork_clients starts clients in this machine's network namespace: not with a placement"
            )
        self.zygote: Zygote | None = None
        self.port = NODE_PORT if self.placement is not None else free_port_pair()
        self.ledger = self.root / "ledger"
        self.start_localnet()
        try:
            await self._deploy()
        except BaseException:  # a start that fails stops what it started: the localnet is up by now
            if (rpc := getattr(self, "rpc", None)) is not None:
                await rpc.close()
            self.stop_localnet()
            if self._tmp is not None:
                self._tmp.cleanup()
            raise
        return self

    async def _deploy(self) -> None:
        """The localnet answering, the coordinator built and deployed over its RPC, and a client of it."""
        self.core = CoordinatorCore()
        self.rpc = Rpc(self.http_url, idl=self.core.idl)
        await self._wait_for_rpc()
        self.authority = Keypair()
        await self.rpc.airdrop(self.authority.pubkey(), 100 * 10**9)
        from cohort.sbf import build

        (program,) = build.build_all(["coordinator"], log=lambda _: None)
        result = await deploy_program(self.rpc, self.authority, program.so_path.read_bytes(),
                                      self.root / "coordinator-keypair.json")  # fmt: skip
        self.program_id: Pubkey = result.program_id
        self.log(f"coordinator {self.program_id} deployed over RPC ({result.elf_size:,} bytes, "
                 f"{result.seconds:.1f} s)")  # fmt: skip
        self.client = RunClient(self.rpc, self.program_id, ws_url=self.ws_url, idl=self.core.idl)

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(
            stop_processes, [t.process for t in self.trainers if t.process is not None]
        )
        if self.zygote is not None:
            await asyncio.to_thread(self.zygote.close)
        await self.rpc.close()
        self.stop_localnet()
        if self._tmp is not None:
            self._tmp.cleanup()

    # -- the localnet process -------------------------------------------------------------------------
    @property
    def rpc_host(self) -> str:
        return self.placement.address(RPC_NODE) if self.placement is not None else "127.0.0.1"

    @property
    def http_url(self) -> str:
        return f"http://{self.rpc_host}:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://{self.rpc_host}:{self.port + 1}"

    def _prefix(self, name: str) -> list[str]:
        return self.placement.prefix(name) if self.placement is not None else []

    def start_localnet(self) -> None:
        assert self.root is not None
        log = open(self.root / "localnet.log", "ab")
        self.localnet = subprocess.Popen(
            [*self._prefix(RPC_NODE), sys.executable, "-m", "cohort.sdk.cli", "localnet", "start",
             "--port", str(self.port), "--ledger", str(self.ledger), "--host", self.rpc_host],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        log.close()

    def stop_localnet(self) -> None:
        stop_process(self.localnet)

    async def _wait_for_rpc(self, timeout: float = 60.0) -> None:
        until = time.monotonic() + timeout
        while True:
            try:
                await self.rpc.raw_request("getHealth", [])
                return
            except Exception:
                if self.localnet.poll() is not None or time.monotonic() > until:
                    raise RuntimeError(
                        f"the localnet did not start (see {self.root}/localnet.log)"
                    ) from None
                await asyncio.sleep(0.2)

    async def restart_localnet(self, down_for: float = 0.0) -> None:
        """Stop the localnet and start it again on the same ledger (websockets drop, state survives)."""
        self.stop_localnet()
        await asyncio.sleep(down_for)
        self.start_localnet()
        await self._wait_for_rpc()

    # -- the run --------------------------------------------------------------------------------------
    def new_wallet(self, name: str) -> tuple[Keypair, Path]:
        assert self.root is not None
        wallet = Keypair()
        path = self.root / f"{name}.json"
        save_keypair(wallet, path)
        return wallet, path

    async def create_run(self, wallets: list[Keypair] | None = None) -> RunFile:
        """Create and open the run of `config` (checkpointers: the first `checkpointers` wallets)."""
        import dataclasses

        run_file = load_run_file(self.config, self.core)
        chosen = tuple(w.pubkey() for w in (wallets or [])[: self.checkpointers])
        run_file = dataclasses.replace(run_file, checkpointers=chosen)
        await self.client.create_run(self.authority, run_file)
        self.run_file = run_file
        return run_file

    async def fund(self, wallet: Keypair, sol: float = 5.0) -> None:
        await self.rpc.airdrop(wallet.pubkey(), int(sol * 10**9))

    def start_trainer(self, name: str, wallet: tuple[Keypair, Path] | None = None,
                      extra: tuple[str, ...] = (), env: dict[str, str] | None = None,
                      entry: tuple[str, ...] = ("-m", "cohort.sdk.cli")) -> TrainerProcess:  # fmt: skip
        """Start `cohort train` (or another `entry` taking its arguments) as `name`, with `extra` arguments
        and `env` on top of the run's environment."""
        assert self.root is not None
        keypair, path = wallet or self.new_wallet(name)
        trainer = next((t for t in self.trainers if t.name == name), None)
        if trainer is None:
            trainer = TrainerProcess(
                name, keypair, path, self.root / f"{name}.events.jsonl", self.root / f"{name}.log"
            )
            self.trainers.append(trainer)
        chosen = {
            *self.env,
            *(env or {}),
        }  # the environment the caller set (not this process's own)
        env = {**os.environ, "COHORT_CLUSTER": self.http_url, "COHORT_WS_URL": self.ws_url,
               "COHORT_WALLET": str(path), "COHORT_PROGRAM_ID": str(self.program_id),
               "COHORT_ANCHORFILE": str(self.root / "Anchorfile.toml"),
               "COHORT_EVENTS": str(trainer.events_path), "COHORT_NAME": name,
               "COHORT_THREADS": os.environ.get("COHORT_THREADS", "1"), "PYTHONUNBUFFERED": "1", **self.env,
               **(env or {})}  # fmt: skip
        (self.root / "Anchorfile.toml").touch()
        bind = ("--bind", f"{self.placement.address(name)}:0") if self.placement is not None else ()
        # a member's checkpoints and check scratch stay under the run's root (removed with it), not in the
        # user's cache, unless the caller chose a directory or a home of its own for them
        own = (
            "--checkpoint-dir" in (*extra, *self.trainer_args)
            or {"HOME", "XDG_CACHE_HOME"} & chosen
        )
        checkpoints = () if own else ("--checkpoint-dir", str(self.root / f"{name}-checkpoints"))
        argv = [
            "train",
            "--run",
            self.run_file.run_id,
            "--logs",
            "none",
            *bind,
            *checkpoints,
            *self.trainer_args,
            *extra,
        ]
        if self.fork_clients and entry == ("-m", "cohort.sdk.cli"):
            if self.zygote is None:
                self.zygote = Zygote(str(self.root / "zygote.log"))
            trainer.process = self.zygote.start(argv, env, str(trainer.log_path))
            return trainer
        log = open(trainer.log_path, "ab")
        trainer.process = subprocess.Popen(
            [*self._prefix(name), sys.executable, *entry, *argv],
            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )  # fmt: skip
        log.close()
        return trainer

    async def start_members(self, count: int, prefix: str = "c",
                            options: Callable[[int], dict[str, Any]] | None = None) -> list[TrainerProcess]:  # fmt: skip
        """`count` funded wallets named prefix0.., the run created (they are its checkpointers) and one
        `cohort train` per wallet; `options(i)` gives start_trainer's keyword arguments for member i."""
        wallets = [self.new_wallet(f"{prefix}{i}") for i in range(count)]
        for wallet, _ in wallets:
            await self.fund(wallet)
        await self.create_run([w for w, _ in wallets])
        return [
            self.start_trainer(f"{prefix}{i}", w, **(options(i) if options else {}))
            for i, w in enumerate(wallets)
        ]

    async def rpc_stats(self) -> dict[str, int]:
        """What the localnet served so far: requests, bytes in and out, notifications, transactions."""
        return await self.rpc.raw_request("localnet_traffic", [])

    async def state(self) -> Run:
        return await self.client.fetch_run(self.run_file.run_id)

    async def wait_for_events(self, name: str, count: int, timeout: float, trainers: list[TrainerProcess] | None = None,
                              **fields: object) -> None:  # fmt: skip
        """Wait until each trainer (all by default) emitted `count` events `name` with these fields."""
        until = time.monotonic() + timeout
        chosen = self.trainers if trainers is None else trainers
        while True:
            missing = [t.name for t in chosen if len([e for e in t.events(name)
                                                      if all(e.get(k) == v for k, v in fields.items())]) < count]  # fmt: skip
            if not missing:
                return
            if time.monotonic() > until:
                tails = "; ".join(
                    f"{t.name}: {recent_events(t)}" for t in chosen if t.name in missing
                )
                raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {count} {name} {fields} from {missing}"
                                   f" (their last events: {tails})")  # fmt: skip
            await asyncio.sleep(0.25)

    async def wait_for(self, predicate: Callable[[Run], bool], timeout: float, what: str,
                       every: float = 0.5) -> Run:  # fmt: skip
        """Poll the run until `predicate` holds; fails after `timeout` seconds, or if a trainer died."""
        until = time.monotonic() + timeout
        while True:
            run = await self.state()
            if predicate(run):
                return run
            if time.monotonic() > until:
                raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what} "
                                   f"(run is {run.state}, epoch {run.progress.epoch}, step {run.progress.step})")  # fmt: skip
            await asyncio.sleep(every)
