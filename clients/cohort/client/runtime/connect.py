"""What a client sets up before it follows its run: the wallet, the RPC and the run (with every refusal a
user must act on: one line and an exit code), the P2P node and exchange, the model worker and the model.
Each step returns the handles it made (`ChainLink`, `PeerSide`, the model); the client keeps them."""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import io
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from solders.keypair import Keypair
from solders.pubkey import Pubkey

from cohort.sdk.client import RunClient
from cohort.sdk.coordinator_core import CoordinatorCore
from cohort.sdk.errors import CohortError, RpcUnavailable, RunNotFound, WalletError
from cohort.sdk.models import Run, RunState
from cohort.sdk.presets import TrainingSpec, training_spec
from cohort.sdk.rpc import Rpc
from cohort.sdk.wallet import load_keypair

from ..p2p import Announcement, NodeKey, P2PNode
from .disk import check_disk
from .events import Events
from .exchange import Exchange
from .launch import member_ranks
from .memory import check_memory, return_freed_memory
from .options import ClientOptions, ClientRefused, ExitCode
from .peers import encode_endpoint
from .weights import CheckpointShelf, default_root, progress_events
from .worker import ModelWorker

if TYPE_CHECKING:
    from .replica import PayloadHeader, Replica

MIN_BALANCE = 10_000_000  # lamports: ~2,000 transaction fees, an epoch of witnesses and ticks


@dataclass(frozen=True)
class ChainLink:
    """The chain side, once the run accepted us: the wallet, the RPC, the run and its training spec."""

    wallet: Keypair
    core: CoordinatorCore
    rpc: Rpc
    chain: RunClient
    run: Run  # as first read
    spec: TrainingSpec
    time_offset: float  # chain clock - local clock


@dataclass(frozen=True)
class PeerSide:
    """The P2P node and what stands on it: the exchange of results, the checkpoint shelf, the model worker."""

    node_key: NodeKey
    node: P2PNode
    endpoint: str  # our address as the chain's Endpoint account holds it
    worker: ModelWorker
    exchange: Exchange
    shelf: CheckpointShelf


async def connect(o: ClientOptions, events: Events, stack: contextlib.AsyncExitStack) -> ChainLink:
    try:
        wallet: Keypair = load_keypair(o.wallet)
    except WalletError as e:
        raise ClientRefused(ExitCode.USAGE, str(e)) from None
    core = CoordinatorCore()
    rpc = await stack.enter_async_context(Rpc(list(o.cluster_urls), idl=core.idl))
    chain = RunClient(rpc, Pubkey.from_string(o.program_id), ws_url=o.ws_url, idl=core.idl)
    try:
        run = await chain.fetch_run(o.run)
        balance = await rpc.balance(wallet.pubkey())
        # the Clock shows whole seconds: the chain's time is at most one second past what it says, so
        # estimate high and let an early tick fail (NothingToTick costs nothing) rather than tick late
        time_offset = await rpc.unix_time() + 1 - time.time()
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
                            f"wallet {wallet.pubkey()} holds {balance / 1e9:.4f} SOL; a client needs "
                            "at least 0.01 SOL for its transaction fees (fund it, e.g. `cohort wallet airdrop`)")  # fmt: skip
    if run.config.join_policy == "Authorized":
        grant = await rpc.account_owner_and_data(
            chain.join_authorization_address(run.address, wallet.pubkey())
        )
        allowed = (
            grant is not None and core.idl.decode_account("JoinAuthorization", grant[1])["allowed"]
        )
        if not allowed:
            raise ClientRefused(ExitCode.NOT_AUTHORIZED,
                                f"run {run.run_id!r} admits only authorized wallets, and "
                                f"{wallet.pubkey()} holds no authorization (ask its join authority)")  # fmt: skip
    spec = training_spec(run.metadata, run.model)
    events.emit("connected", run=run.run_id, address=str(run.address), state=str(run.state),
                wallet=str(wallet.pubkey()), rpc=rpc.url)  # fmt: skip
    check_memory(
        spec, run.config, run.run_id, o, member_ranks()
    )  # before anything is built, joined or sent
    check_disk(spec, run.config, run.run_id, o)
    return ChainLink(wallet, core, rpc, chain, run, spec, time_offset)


async def start_p2p(o: ClientOptions, link: ChainLink, events: Events, post: Callable[[object], None],
                    check: Callable[[bytes], PayloadHeader], payload_size: Callable[[], int],
                    stack: contextlib.AsyncExitStack) -> PeerSide:  # fmt: skip
    """The node, the exchange on it (`check` and `payload_size` ask the model once it is built), the shelf."""
    run = link.run
    node_key = NodeKey.derive(bytes(link.wallet), bytes(run.address))
    exchange: Exchange | None = None  # made once the node is: its messages go there

    def on_message(announcement: Announcement) -> None:
        assert exchange is not None
        exchange.on_message(announcement)

    if o.p2p == "iroh":
        from ..p2p import IrohConfig

        config = IrohConfig(bind_host=o.bind_host, port=o.bind_port, relay_urls=o.relays)
        node = P2PNode.iroh(node_key, bytes(run.address), config, on_message=on_message)
    else:
        node = P2PNode.http(node_key, bytes(run.address), host=o.bind_host, port=o.bind_port,
                            on_message=on_message)  # fmt: skip
    node = await stack.enter_async_context(node)
    worker = ModelWorker()
    stack.callback(worker.close)
    exchange = Exchange(
        node, node_key, link.core.idl, run.address, events, post, check, payload_size
    )
    stack.callback(exchange.reset)
    root = o.checkpoint_dir or default_root(str(run.address), node_key.node_id.hex()[:16])
    shelf = CheckpointShelf(root, node, worker)
    shelf.progress = progress_events(events)  # a joiner's fetch: bytes, rate and ETA as events
    endpoint = encode_endpoint(node.address)
    events.emit("p2p_started", node_id=node_key.node_id.hex(), endpoint=endpoint)
    return PeerSide(node_key, node, endpoint, worker, exchange, shelf)


def install_signals(stop: Callable[[], None]) -> None:
    """Ctrl-C and SIGTERM leave after what is in flight; SIGUSR1 writes every thread's stack to stderr at
    once, from the signal itself (a client whose event loop is stuck cannot be asked any other way)."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop)
    with contextlib.suppress(AttributeError, RuntimeError, ValueError, io.UnsupportedOperation):
        faulthandler.register(signal.SIGUSR1, file=sys.__stderr__, all_threads=True)


async def build_trainer(o: ClientOptions, link: ChainLink, peers: PeerSide, events: Events,
                        post: Callable[[object], None]) -> Replica:  # fmt: skip
    """The model side; a model or data that cannot be built here is posted as a refusal (and raised)."""
    import torch  # the training stack loads only once there is something to train

    from .slowdown import SlowedReplica
    from .synthetic import SyntheticReplica
    from .trainer import LocalReplica, initial_seed

    if o.threads:
        torch.set_num_threads(o.threads)
    run, spec, worker = link.run, link.spec, peers.worker
    started = time.perf_counter()
    events.status(model=f"building {spec.preset}…")
    try:
        seed = initial_seed(bytes(run.address))
        trainer: Replica  # every kind below is one (replica.py)
        if (
            o.synthetic
        ):  # protocol tests at scale: no training (synthetic.py says what it does instead)
            trainer = await worker.run(lambda: SyntheticReplica(spec, seed=seed,
                                                                     seconds_per_sequence=o.synthetic_seconds))  # fmt: skip
        elif (
            member_ranks() > 1
        ):  # rank 0 of a member that spans processes (launch.py): the others hold shards
            from .sharded import ShardedReplica

            scratch = (
                peers.shelf.root / "replica"
            )  # the states it commits when the run verifies, on rank 0's disk
            scratch.mkdir(parents=True, exist_ok=True)
            trainer = await worker.run(lambda: ShardedReplica(spec, seed=seed, device=o.torch_device(),
                                                                   micro_batch_size=o.micro_batch_size,
                                                                   scratch=scratch,
                                                                   activation_checkpointing=o.lean_memory))  # fmt: skip
        else:
            scratch = (
                peers.shelf.root / "replica"
            )  # what verification keeps on disk, beside our checkpoints
            scratch.mkdir(parents=True, exist_ok=True)
            if o.lean_memory:
                return_freed_memory()
            trainer = await worker.run(lambda: LocalReplica(spec, seed=seed, device=o.torch_device(),
                                                                 micro_batch_size=o.micro_batch_size, scratch=scratch,
                                                                 activation_checkpointing=o.lean_memory))  # fmt: skip
        if o.slowdown > 1:
            trainer = SlowedReplica(trainer, o.slowdown)
    except (
        ValueError,
        OSError,
        RuntimeError,
    ) as e:  # data errors and vocabulary mismatches included
        post(ClientRefused(ExitCode.DATA_UNAVAILABLE,
                                f"cannot build run {run.run_id!r}'s model and data here: {e}"))  # fmt: skip
        raise
    params = sum(p.numel() for p in trainer.model.parameters())
    events.status(model=f"{spec.preset} ({params:,} parameters)")
    events.emit("model_loaded", preset=spec.preset, parameters=params,
                     digest=await worker.run(trainer.digest),
                     seconds=round(time.perf_counter() - started, 3), device=str(trainer.device))  # fmt: skip
    return trainer
