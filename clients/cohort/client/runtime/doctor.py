"""`cohort doctor [--run RUN]`: what this machine can do for a run, before anything is joined or sent.

One row per check: the torch build and its devices, the memory the run's model needs (cohort.sdk.sizing's
estimate, the one `cohort train` refuses on) against what the device has, the RPC (reachable, latency), the
run (found, open, this client's version, authorization), the wallet's balance, the P2P node (it binds, its
direct addresses, its relay), and the disk the checkpoints need. The exit status is 0 when every check passed
(warnings allowed) and otherwise the `cohort train` exit code of the first failed check: what `train` would
have refused with.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import click

from cohort.sdk.cli_common import Settings, chain_options
from cohort.sdk.errors import CohortError, RunNotFound, WalletError

from .options import ClientOptions, ClientRefused, ExitCode

RPC_TIMEOUT = 5.0  # seconds for each RPC request the doctor makes
RPC_PINGS = 3  # requests timed for the latency
RELAY_WAIT = 5.0  # seconds for the P2P node to reach a relay it was given


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # ok | warn | fail | skip
    detail: str
    code: int = 0  # the ExitCode a failure means (0 unless status is fail)


@dataclass
class Findings:
    """What the checks learned that later checks use."""

    run: Any = None  # cohort.sdk.models.Run
    spec: Any = None  # cohort.sdk.presets.TrainingSpec
    torch_ok: bool = False


def exit_code(checks: list[Check]) -> int:
    return next((c.code or int(ExitCode.ERROR) for c in checks if c.status == "fail"), 0)


async def diagnose(o: ClientOptions) -> list[Check]:
    """Every check, in the order the table shows them."""
    found = Findings()
    checks = [_torch(o, found), *await _chain(o, found), _memory(o, found)]
    checks.append(await _p2p(o))
    checks.append(_disk(o, found))
    return checks


def _torch(o: ClientOptions, found: Findings) -> Check:
    try:
        import torch
    except ImportError:
        return Check(
            "torch", "fail", "not installed: pip install 'cohort[train]'", int(ExitCode.ERROR)
        )
    found.torch_ok = True
    build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU-only build"
    devices = [f"cpu ({torch.get_num_threads()} threads)"]
    if torch.cuda.is_available():
        for k in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(k)
            devices.append(f"cuda:{k} {p.name} {p.total_memory / 2**30:.0f} GiB")
    detail = f"{torch.__version__}, {build}; devices: {', '.join(devices)}"
    if o.device.startswith("cuda") and not torch.cuda.is_available():
        return Check(
            "torch",
            "fail",
            f"--device {o.device}, but torch sees no GPU ({detail})",
            int(ExitCode.ERROR),
        )
    return Check("torch", "ok", detail)


async def _chain(o: ClientOptions, found: Findings) -> list[Check]:
    """RPC, run and wallet rows (the run and the balance need the RPC)."""
    from cohort.sdk.coordinator_core import CoordinatorCore
    from cohort.sdk.rpc import Rpc
    from cohort.sdk.wallet import load_keypair

    from .connect import MIN_BALANCE

    try:
        wallet = load_keypair(o.wallet)
    except WalletError as e:
        wallet_row = Check("wallet", "fail", str(e), int(ExitCode.USAGE))
        wallet = None
    core = CoordinatorCore()
    rows: list[Check] = []
    async with Rpc(list(o.cluster_urls), idl=core.idl, retries=1, timeout=RPC_TIMEOUT) as rpc:
        try:
            times = []
            version = await rpc.raw_request("getVersion", [])
            for _ in range(RPC_PINGS):
                started = time.perf_counter()
                await rpc.raw_request("getSlot", [])
                times.append(time.perf_counter() - started)
            core_version = version.get("solana-core", "?") if isinstance(version, dict) else "?"
            rows.append(Check("rpc", "ok", f"{rpc.url}: {statistics.median(times) * 1000:.0f} ms median of "
                                           f"{RPC_PINGS} (solana-core {core_version})"))  # fmt: skip
        except CohortError as e:
            rows.append(Check("rpc", "fail", str(e)[:300], int(ExitCode.RPC_UNREACHABLE)))
            rows.append(Check("run", "skip", "needs the RPC"))
            rows.append(
                wallet_row
                if wallet is None
                else Check("wallet", "skip", f"{wallet.pubkey()}: needs the RPC")
            )
            return rows
        rows.append(await _run(o, found, rpc, core, wallet))
        if wallet is None:
            rows.append(wallet_row)
        else:
            try:
                balance = await rpc.balance(wallet.pubkey())
            except CohortError as e:
                rows.append(
                    Check(
                        "wallet",
                        "fail",
                        f"{wallet.pubkey()}: {e}"[:300],
                        int(ExitCode.RPC_UNREACHABLE),
                    )
                )
            else:
                sol = f"{wallet.pubkey()} holds {balance / 1e9:.4f} SOL"
                if balance < MIN_BALANCE:
                    rows.append(Check("wallet", "fail", f"{sol}; a client needs at least {MIN_BALANCE / 1e9:.2f} SOL "
                                      "for its fees (`cohort wallet airdrop` on a test cluster)", int(ExitCode.UNFUNDED)))  # fmt: skip
                else:
                    rows.append(Check("wallet", "ok", sol))
    return rows


async def _run(o: ClientOptions, found: Findings, rpc: Any, core: Any, wallet: Any) -> Check:
    if not o.run:
        return Check(
            "run", "skip", "no --run given: memory and disk are not checked against a model"
        )
    from solders.pubkey import Pubkey

    from cohort.sdk.client import RunClient
    from cohort.sdk.models import RunState
    from cohort.sdk.presets import training_spec

    try:
        chain = RunClient(rpc, Pubkey.from_string(o.program_id), idl=core.idl)
        run = await chain.fetch_run(o.run)
    except RunNotFound as e:
        return Check("run", "fail", str(e), int(ExitCode.RUN_NOT_FOUND))
    except (CohortError, ValueError) as e:
        return Check("run", "fail", f"{o.run}: {e}"[:300], int(ExitCode.RUN_NOT_FOUND))
    found.run = run
    found.spec = training_spec(run.metadata, run.model)
    required = run.metadata.client_version
    if required and required != o.client_version:
        return Check("run", "fail", f"run {run.run_id!r} needs client version {required!r}, this is "
                                    f"{o.client_version!r}", int(ExitCode.VERSION_MISMATCH))  # fmt: skip
    if run.state in (RunState.Finished, RunState.Paused, RunState.Uninitialized):
        return Check("run", "fail", f"run {run.run_id!r} is {run.state.lower()}: nothing to join",
                     int(ExitCode.RUN_HALTED))  # fmt: skip
    if run.config.join_policy == "Authorized" and wallet is not None:
        grant = await rpc.account_owner_and_data(
            chain.join_authorization_address(run.address, wallet.pubkey())
        )
        if grant is None or not core.idl.decode_account("JoinAuthorization", grant[1])["allowed"]:
            return Check("run", "fail", f"run {run.run_id!r} admits only authorized wallets; {wallet.pubkey()} "
                                        "holds no authorization", int(ExitCode.NOT_AUTHORIZED))  # fmt: skip
    return Check("run", "ok", f"{run.run_id!r} ({found.spec.preset}): {run.state}, epoch {run.progress.epoch}, "
                              f"step {run.progress.step}, {len(run.clients)} clients")  # fmt: skip


def _memory(o: ClientOptions, found: Findings) -> Check:
    from cohort.sdk.sizing import format_bytes

    from .memory import available_memory, check_memory

    device = o.device if o.device != "auto" or not found.torch_ok else o.torch_device()
    device = "cpu" if device == "auto" else device
    try:
        have = (
            int(o.memory_limit * 2**30) if o.memory_limit is not None else available_memory(device)
        )
    except Exception as e:  # a GPU that does not answer
        return Check(
            "memory",
            "fail",
            f"{device}: {type(e).__name__}: {e}"[:300],
            int(ExitCode.TOO_LITTLE_MEMORY),
        )
    where = (
        f"--memory-limit {format_bytes(have)}"
        if o.memory_limit is not None
        else f"{device} has {format_bytes(have)} available"
    )
    if found.run is None:
        return Check("memory", "ok" if o.run == "" else "skip", where)
    try:
        estimate = check_memory(found.spec, found.run.config, found.run.run_id, o)
    except ClientRefused as refusal:
        return Check("memory", "fail", str(refusal), int(refusal.code))
    if estimate is None:
        return Check("memory", "warn", f"{where}; the model's size is not known, so not checked")
    return Check("memory", "ok", f"needs about {format_bytes(estimate.total)}; {where}")


async def _p2p(o: ClientOptions) -> Check:
    """Start this client's P2P node as `cohort train` would and say how peers can reach it."""
    try:
        from ..p2p import IrohConfig, NodeKey, P2PNode
    except ImportError as e:
        return Check(
            "p2p",
            "fail",
            f"{e.name} is not installed: pip install 'cohort[train]'",
            int(ExitCode.ERROR),
        )
    from cohort.localnet.config import is_loopback

    try:
        if o.p2p == "iroh":
            node = P2PNode.iroh(
                NodeKey.generate(), b"doctor", IrohConfig(o.bind_host, o.bind_port, o.relays)
            )
        else:
            node = P2PNode.http(NodeKey.generate(), b"doctor", host=o.bind_host, port=o.bind_port)
        async with node:
            address = node.address
            until = time.monotonic() + (RELAY_WAIT if o.relays else 0)
            while o.relays and address.relay_url is None and time.monotonic() < until:
                await asyncio.sleep(0.2)
                address = node.address
    except (OSError, ValueError, RuntimeError) as e:
        return Check(
            "p2p",
            "fail",
            f"{o.p2p} on {o.bind}: {type(e).__name__}: {e}"[:300],
            int(ExitCode.ERROR),
        )
    direct = ", ".join(address.addrs) or "none"
    relay = address.relay_url or ("not reached" if o.relays else "none (no --relay)")
    detail = f"{o.p2p}: direct {direct}; relay {relay}"
    if o.relays and address.relay_url is None:
        return Check("p2p", "warn", detail + f": no relay answered within {RELAY_WAIT:.0f} s")
    if is_loopback(o.bind_host):
        return Check("p2p", "warn", detail + " (loopback only: peers on other machines need --bind 0.0.0.0:PORT"
                                             " or a relay)")  # fmt: skip
    return Check("p2p", "ok", detail)


def _disk(o: ClientOptions, found: Findings) -> Check:
    from cohort.sdk.sizing import format_bytes

    from .disk import check_disk, free_space, member_root

    free, existing = free_space(member_root(o))
    where = f"{format_bytes(free)} free at {existing}"
    if found.run is None or found.spec is None:
        return Check("disk", "ok", where)
    try:
        estimate = check_disk(found.spec, found.run.config, found.run.run_id, o)
    except ClientRefused as refusal:
        return Check("disk", "fail", str(refusal), int(refusal.code))
    return Check(
        "disk", "ok", where if estimate is None else f"{where}; a member keeps {estimate.summary()}"
    )


@click.command("doctor")
@click.option(
    "--run", "run_id", default="", envvar="COHORT_RUN", help="Check against this run's needs."
)
@click.option(
    "--device", default="auto", envvar="COHORT_DEVICE", help="auto | cpu | cuda | cuda:N."
)
@click.option("--memory-limit", type=float, metavar="GIB", envvar="COHORT_MEMORY_LIMIT",
              help="GiB this member may use (as `cohort train --memory-limit`).")  # fmt: skip
@click.option(
    "--micro-batch-size", type=int, envvar="COHORT_MICRO_BATCH_SIZE", help="As `cohort train`."
)
@click.option("--lean-memory", is_flag=True, envvar="COHORT_LEAN_MEMORY", help="As `cohort train`.")
@click.option("--checkpoint-dir", type=click.Path(file_okay=False, path_type=Path), envvar="COHORT_CHECKPOINT_DIR",
              help="Where checkpoints would be written.")  # fmt: skip
@click.option("--p2p", type=click.Choice(["iroh", "http"]), default="iroh", envvar="COHORT_P2P")
@click.option(
    "--bind", default="127.0.0.1:0", envvar="COHORT_BIND", help="HOST:PORT the P2P node listens on."
)
@click.option(
    "--relay", "relays", multiple=True, envvar="COHORT_RELAYS", help="iroh relay URL (repeatable)."
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object instead of the table.")
@chain_options
def doctor(settings: Settings, run_id: str, device: str, memory_limit: float | None, micro_batch_size: int | None,
           lean_memory: bool, checkpoint_dir: Path | None, p2p: str, bind: str, relays: tuple[str, ...],
           as_json: bool) -> None:  # fmt: skip
    """What this machine can do for a run: torch and devices, memory, RPC, P2P, wallet, disk. Exits
    non-zero (the code `cohort train` would refuse with) when it cannot join."""
    program_id = ""
    if run_id:
        try:
            program_id = str(settings.program_id())
        except CohortError as e:
            raise click.ClickException(str(e)) from None
    try:
        options = ClientOptions(run=run_id, wallet=settings.wallet_path, cluster_urls=settings.cluster.urls,
                                program_id=program_id, device=device, p2p=p2p, bind=bind, relays=relays,
                                micro_batch_size=micro_batch_size, memory_limit=memory_limit,
                                lean_memory=lean_memory, checkpoint_dir=checkpoint_dir, logs="none")  # fmt: skip
    except ValueError as e:
        raise click.UsageError(str(e)) from None
    checks = asyncio.run(diagnose(options))
    code = exit_code(checks)
    if as_json:
        click.echo(
            json.dumps({"ok": code == 0, "exit_code": code, "checks": [asdict(c) for c in checks]})
        )
    else:
        width = max(len(c.name) for c in checks)
        marks = {"ok": "ok", "warn": "WARN", "fail": "FAIL", "skip": "-"}
        for c in checks:
            click.echo(f"{c.name:<{width}}  {marks[c.status]:<4}  {c.detail}")
        failed = next((c for c in checks if c.status == "fail"), None)
        click.echo("this machine can join" + (f" run {run_id!r}" if run_id else " a run") if failed is None
                   else f"cannot join: {failed.name}: {failed.detail}")  # fmt: skip
    raise SystemExit(code)
