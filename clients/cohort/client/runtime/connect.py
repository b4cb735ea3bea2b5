"""What a client sets up before it follows its run: the wallet, the RPC and the run (with every refusal a
user must act on: one line and an exit code), the P2P node and exchange, the model worker and the model."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from typing import TYPE_CHECKING

from solders.keypair import Keypair
from solders.pubkey import Pubkey

from cohort.sdk.client import RunClient
from cohort.sdk.coordinator_core import CoordinatorCore
from cohort.sdk.errors import CohortError, RpcUnavailable, RunNotFound, WalletError
from cohort.sdk.models import RunState
from cohort.sdk.presets import training_spec
from cohort.sdk.rpc import Rpc
from cohort.sdk.wallet import load_keypair

from ..p2p import NodeKey, P2PNode
from .exchange import Exchange
from .launch import member_ranks
from .memory import check_memory, return_freed_memory
from .options import ClientRefused, ExitCode
from .peers import encode_endpoint
from .weights import CheckpointShelf, default_root, progress_events
from .worker import ModelWorker

if TYPE_CHECKING:
    from .loop import Client
    from .replica import PayloadHeader, Replica

MIN_BALANCE = 10_000_000  # lamports: ~2,000 transaction fees, an epoch of witnesses and ticks


async def connect(self: Client, stack: contextlib.AsyncExitStack) -> None:
    o = self.options
    try:
        self.wallet: Keypair = load_keypair(o.wallet)
    except WalletError as e:
        raise ClientRefused(ExitCode.USAGE, str(e)) from None
    self.core = CoordinatorCore()
    self.rpc = await stack.enter_async_context(Rpc(list(o.cluster_urls), idl=self.core.idl))
    self.chain = RunClient(
        self.rpc, Pubkey.from_string(o.program_id), ws_url=o.ws_url, idl=self.core.idl
    )
    try:
        run = await self.chain.fetch_run(o.run)
        balance = await self.rpc.balance(self.wallet.pubkey())
        # the Clock shows whole seconds: the chain's time is at most one second past what it says, so
        # estimate high and let an early tick fail (NothingToTick costs nothing) rather than tick late
        self.time_offset = await self.rpc.unix_time() + 1 - time.time()
    except RunNotFound as e:
        raise ClientRefused(ExitCode.RUN_NOT_FOUND, str(e)) from None
    except (RpcUnavailable, CohortError) as e:
        raise ClientRefused(ExitCode.RPC_UNREACHABLE, str(e)) from None
    required = run.metadata.client_version
    if required and required != o.client_version:
        raise ClientRefused(ExitCode.VERSION_MISMATCH,
                            f"run {run.run_id!r} needs client version {required!r}, this is {o.client_version!r}")  # fmt: skip
    if run.state == RunState.Finished:
        raise ClientRefused(ExitCode.RUN_HALTED, f"run {run.run_id!r} is finished")
    if run.state in (RunState.Paused, RunState.Uninitialized):
        raise ClientRefused(
            ExitCode.RUN_HALTED, f"run {run.run_id!r} is {run.state.lower()}: nothing to join"
        )
    if balance < MIN_BALANCE:
        raise ClientRefused(ExitCode.UNFUNDED,
                            f"wallet {self.wallet.pubkey()} holds {balance / 1e9:.4f} SOL; a client needs "
                            "at least 0.01 SOL for its transaction fees (fund it, e.g. `cohort wallet airdrop`)")  # fmt: skip
    if run.config.join_policy == "Authorized":
        grant = await self.rpc.account_owner_and_data(
            self.chain.join_authorization_address(run.address, self.wallet.pubkey())
        )
        allowed = (
            grant is not None
            and self.core.idl.decode_account("JoinAuthorization", grant[1])["allowed"]
        )
        if not allowed:
            raise ClientRefused(ExitCode.NOT_AUTHORIZED,
                                f"run {run.run_id!r} admits only authorized wallets, and "
                                f"{self.wallet.pubkey()} holds no authorization (ask its join authority)")  # fmt: skip
    self.latest = run
    self.run_address = run.address
    self.spec = training_spec(run.metadata, run.model)
    self.events.emit("connected", run=run.run_id, address=str(run.address), state=str(run.state),
                     wallet=str(self.wallet.pubkey()), rpc=self.rpc.url)  # fmt: skip
    check_memory(
        self.spec, run.config, run.run_id, o, member_ranks()
    )  # before anything is built, joined or sent


async def start_p2p(self: Client, stack: contextlib.AsyncExitStack) -> None:
    o, run = self.options, self.latest
    assert run is not None
    self.node_key = NodeKey.derive(bytes(self.wallet), bytes(run.address))
    if o.p2p == "iroh":
        from ..p2p import IrohConfig

        config = IrohConfig(bind_host=o.bind_host, port=o.bind_port, relay_urls=o.relays)
        node = P2PNode.iroh(
            self.node_key,
            bytes(run.address),
            config,
            on_message=lambda a: self.exchange.on_message(a),
        )
    else:
        node = P2PNode.http(self.node_key, bytes(run.address), host=o.bind_host, port=o.bind_port,
                            on_message=lambda a: self.exchange.on_message(a))  # fmt: skip
    self.node = await stack.enter_async_context(node)
    self.worker = ModelWorker()
    stack.callback(self.worker.close)
    self.exchange = Exchange(self.node, self.node_key, self.core.idl, run.address, self.events, self.post,
                             lambda payload: _check(self, payload), lambda: _payload_size(self))  # fmt: skip
    stack.callback(self.exchange.reset)
    root = o.checkpoint_dir or default_root(str(run.address), self.node_key.node_id.hex()[:16])
    self.shelf = CheckpointShelf(root, self.node, self.worker)
    self.shelf.progress = progress_events(
        self.events
    )  # a joiner's fetch: bytes, rate and ETA as events
    self.endpoint = encode_endpoint(self.node.address)
    self.events.emit("p2p_started", node_id=self.node_key.node_id.hex(), endpoint=self.endpoint)


def _check(self: Client, payload: bytes) -> PayloadHeader:
    """A peer's payload checked by our model's codec (refused until the model is built)."""
    if not self.trainer_ready.done():
        raise ValueError("no model yet to check results against")
    return self.trainer_ready.result().check(payload)


def _payload_size(self: Client) -> int:
    return self.trainer_ready.result().payload_size if self.trainer_ready.done() else 0


def install_signals(self: Client) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, self.stop)


async def build_trainer(self: Client) -> Replica:
    import torch  # the training stack loads only once there is something to train

    from .slowdown import SlowedReplica
    from .synthetic import SyntheticReplica
    from .trainer import LocalReplica, initial_seed

    if self.options.threads:
        torch.set_num_threads(self.options.threads)
    run = self.latest
    assert run is not None
    started = time.perf_counter()
    self.events.status(model=f"building {self.spec.preset}…")
    try:
        o, seed = self.options, initial_seed(bytes(run.address))
        trainer: Replica  # every kind below is one (replica.py)
        if (
            o.synthetic
        ):  # protocol tests at scale: no training (synthetic.py says what it does instead)
            trainer = await self.worker.run(lambda: SyntheticReplica(self.spec, seed=seed,
                                                                     seconds_per_sequence=o.synthetic_seconds))  # fmt: skip
        elif (
            member_ranks() > 1
        ):  # rank 0 of a member that spans processes (launch.py): the others hold shards
            from .sharded import ShardedReplica

            scratch = (
                self.shelf.root / "replica"
            )  # the states it commits when the run verifies, on rank 0's disk
            scratch.mkdir(parents=True, exist_ok=True)
            trainer = await self.worker.run(lambda: ShardedReplica(self.spec, seed=seed, device=o.torch_device(),
                                                                   micro_batch_size=o.micro_batch_size,
                                                                   scratch=scratch,
                                                                   activation_checkpointing=o.lean_memory))  # fmt: skip
        else:
            scratch = (
                self.shelf.root / "replica"
            )  # what verification keeps on disk, beside our checkpoints
            scratch.mkdir(parents=True, exist_ok=True)
            if o.lean_memory:
                return_freed_memory()
            trainer = await self.worker.run(lambda: LocalReplica(self.spec, seed=seed, device=o.torch_device(),
                                                                 micro_batch_size=o.micro_batch_size, scratch=scratch,
                                                                 activation_checkpointing=o.lean_memory))  # fmt: skip
        if o.slowdown > 1:
            trainer = SlowedReplica(trainer, o.slowdown)
    except (
        ValueError,
        OSError,
        RuntimeError,
    ) as e:  # data errors and vocabulary mismatches included
        self.post(ClientRefused(ExitCode.DATA_UNAVAILABLE,
                                f"cannot build run {run.run_id!r}'s model and data here: {e}"))  # fmt: skip
        raise
    params = sum(p.numel() for p in trainer.model.parameters())
    self.events.status(model=f"{self.spec.preset} ({params:,} parameters)")
    self.events.emit("model_loaded", preset=self.spec.preset, parameters=params,
                     digest=await self.worker.run(trainer.digest),
                     seconds=round(time.perf_counter() - started, 3), device=str(trainer.device))  # fmt: skip
    return trainer
