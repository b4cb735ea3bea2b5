"""The training client: follow the run on chain, train the assigned batches with DisTrO, swap results
with peers, witness, tick. One `Client` per wallet; `await Client(options).run()` returns an exit code.

Everything the client does is a function of the newest Run state it saw plus its own progress (which
steps it trained, applied and witnessed), so missed updates and phase jumps are harmless: on every state
it does what that state asks and catches up on what it missed. Per round (psyche-reference 3.4):

    RoundTrain(step s)   apply the results of step s-2 that round s-1's witnesses attested
                         train our batch of step s → DisTrO payload → blob + signed announcement
                         (meanwhile) fetch every peer's result of step s, and s-1 stragglers
                         Finished(s) once trained and holding all of step s-1
                         if elected: witness step s-1's results once everyone said Finished
    RoundWitness         an elected witness that has not sent yet sends what it has
    Cooldown             every replica holds the same weights: their digest is logged, the checkpoint
                         written and served (checkpointers commit its hash); joiners start from it

A result the witnesses accepted that we cannot get in time makes us leave the epoch (exit_run, rejoin
later) instead of applying something else than our peers: a replica never silently diverges.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from solders.keypair import Keypair
from solders.pubkey import Pubkey

from cohort.sdk.client import RunClient
from cohort.sdk.coordinator_core import CoordinatorCore, Env
from cohort.sdk.errors import (
    CohortError,
    InsufficientFunds,
    ProgramError,
    RpcUnavailable,
    RunNotFound,
    WalletError,
)
from cohort.sdk.models import Checkpoint, Run, RunState
from cohort.sdk.presets import training_spec
from cohort.sdk.rpc import Rpc
from cohort.sdk.wallet import load_keypair

from ..p2p import Announcement, NodeId, NodeKey, P2PNode, PeerAddress
from .events import Events
from .exchange import Exchange
from .messages import Finished, Ready, Result
from .options import ClientOptions, ClientRefused, ExitCode
from .peers import decode_endpoint, encode_endpoint
from .rounds import (
    RoundView,
    assignments,
    consensus,
    drifted,
    participants_and_bloom,
    round_step,
    round_view,
    trains,
    unhealthy,
    witness_position,
)
from .weights import CheckpointShelf, default_root

if TYPE_CHECKING:
    from .trainer import Trainer  # imported when there is something to train (it loads torch)

# program errors that only mean another client got there first, or the phase moved on meanwhile
LOST_RACE = {"NothingToTick", "InvalidRunState", "DuplicateWitness", "WitnessesFull", "WrongStep",
             "InvalidHealthCheck", "NotInEpoch", "SeedPending", "RoundOver", "NoChange", "AlreadyJoined",
             "JoinDuringWarmup"}  # fmt: skip
REFUSALS = {
    "Halted": ExitCode.RUN_HALTED, "Finished": ExitCode.RUN_HALTED,
    "JoinNotAuthorized": ExitCode.NOT_AUTHORIZED, "RunFull": ExitCode.RUN_FULL,
    "RegistryFull": ExitCode.RUN_FULL,
}  # fmt: skip
POLL = 0.1  # seconds between checks of a waiting condition (bounded by the phase's own deadline)
EVAL_EVERY = 10  # steps between held-out evaluations (run while waiting for the round's witnesses)
EVAL_SEQUENCES = 32  # validation sequences per evaluation (the same ones on every client)


class Client:
    def __init__(self, options: ClientOptions, events: Events | None = None) -> None:
        self.options = options
        self.events = events or Events(options.events, options.logs, name=options.name)
        self.latest: Run | None = None
        self.new_state = asyncio.Event()  # the follower saw a newer Run (only the main loop waits on it)
        self.changed = asyncio.Event()  # anything happened (waiters poll it with short timeouts)
        self.fatal: ClientRefused | None = None
        self.refusal: str | None = None  # the one line a refusal is explained in
        self.stopping = False
        self.trainer: Trainer | None = None
        self.weights_epoch: int | None = None  # the epoch whose starting weights the model holds
        self.applied_through = 0
        self.epoch: int | None = None  # the epoch we are a prepared member of
        self.ready_sent = False
        self.warmup_witnessed = False
        self.witnessed: set[int] = set()
        self.finished_sent: set[int] = set()
        self.round_tasks: dict[int, asyncio.Task] = {}
        self.background: set[asyncio.Task] = set()
        self.compute = asyncio.Lock()  # the model is used by one thread at a time
        self.applying = asyncio.Lock()  # steps are applied once each, in order
        self.cooled: set[int] = set()  # epochs whose Cooldown we handled
        self.time_offset = 0.0  # chain clock - local clock
        self.last_eval = None  # EvalResult of our latest held-out evaluation, reported when we witness

    # -- the outer shell ------------------------------------------------------------------------------
    async def run(self) -> ExitCode:
        try:
            async with contextlib.AsyncExitStack() as stack:
                await self._connect(stack)
                await self._start_p2p(stack)
                stack.push_async_callback(self._leave)
                self._install_signals()
                self.model_ready = self._spawn(self._build_trainer(self.latest))  # while we wait to start
                self._spawn(self._follow())
                self._spawn(self._tick_loop())
                return await self._main()
        except ClientRefused as refusal:
            self.refusal = str(refusal)
            self.events.emit("refused", code=int(refusal.code), reason=str(refusal))
            return refusal.code
        finally:
            for task in self.background:
                task.cancel()
            self.events.close()

    async def _connect(self, stack: contextlib.AsyncExitStack) -> None:
        o = self.options
        try:
            self.wallet: Keypair = load_keypair(o.wallet)
        except WalletError as e:
            raise ClientRefused(ExitCode.USAGE, str(e)) from None
        self.core = CoordinatorCore()
        self.rpc = await stack.enter_async_context(Rpc(list(o.cluster_urls), idl=self.core.idl))
        self.chain = RunClient(self.rpc, Pubkey.from_string(o.program_id), ws_url=o.ws_url, idl=self.core.idl)
        try:
            run = await self.chain.fetch_run(o.run)
            balance = await self.rpc.balance(self.wallet.pubkey())
            # the Clock shows whole seconds: the chain's time is at most one second past what it says, so
            # estimate high and let an early tick fail (NothingToTick costs nothing) rather than tick late
            self.time_offset = await self.rpc.unix_time() + 1 - time.time()
        except RunNotFound as e:
            raise ClientRefused(ExitCode.RUN_NOT_FOUND, str(e)) from None
        except RpcUnavailable as e:
            raise ClientRefused(ExitCode.RPC_UNREACHABLE, str(e)) from None
        except CohortError as e:
            raise ClientRefused(ExitCode.RPC_UNREACHABLE, str(e)) from None
        required = run.metadata.client_version
        if required and required != o.client_version:
            raise ClientRefused(ExitCode.VERSION_MISMATCH,
                                f"run {run.run_id!r} needs client version {required!r}, this is {o.client_version!r}")  # fmt: skip
        if run.state == RunState.Finished:
            raise ClientRefused(ExitCode.RUN_HALTED, f"run {run.run_id!r} is finished")
        if run.state in (RunState.Paused, RunState.Uninitialized):
            raise ClientRefused(ExitCode.RUN_HALTED, f"run {run.run_id!r} is {run.state.lower()}: nothing to join")
        if balance < 10_000_000:  # ~2,000 transaction fees: an epoch of witnesses and ticks
            raise ClientRefused(ExitCode.UNFUNDED,
                                f"wallet {self.wallet.pubkey()} holds {balance / 1e9:.4f} SOL; a client needs "
                                "at least 0.01 SOL for its transaction fees (fund it, e.g. `cohort wallet airdrop`)")  # fmt: skip
        if run.config.join_policy == "Authorized":
            grant = await self.rpc.account_owner_and_data(
                self.chain.join_authorization_address(run.address, self.wallet.pubkey()))
            allowed = grant is not None and self.core.idl.decode_account("JoinAuthorization", grant[1])["allowed"]
            if not allowed:
                raise ClientRefused(ExitCode.NOT_AUTHORIZED,
                                    f"run {run.run_id!r} admits only authorized wallets, and "
                                    f"{self.wallet.pubkey()} holds no authorization (ask its join authority)")  # fmt: skip
        self.latest = run
        self.spec = training_spec(run.metadata, run.model)
        self.events.emit("connected", run=run.run_id, address=str(run.address), state=str(run.state),
                         wallet=str(self.wallet.pubkey()), rpc=self.rpc.url)  # fmt: skip

    async def _start_p2p(self, stack: contextlib.AsyncExitStack) -> None:
        o, run = self.options, self.latest
        assert run is not None
        self.node_key = NodeKey.derive(bytes(self.wallet), bytes(run.address))
        if o.p2p == "iroh":
            from ..p2p import IrohConfig

            config = IrohConfig(bind_host=o.bind_host, port=o.bind_port, relay_urls=o.relays)
            node = P2PNode.iroh(self.node_key, bytes(run.address), config, on_message=self._on_gossip)
        else:
            node = P2PNode.http(self.node_key, bytes(run.address), host=o.bind_host, port=o.bind_port,
                                on_message=self._on_gossip)  # fmt: skip
        self.node = await stack.enter_async_context(node)
        self.exchange = Exchange(self.node, self.core, self.events, lambda: self.latest, self._check,
                                 self._spawn, self.changed)  # fmt: skip
        stack.callback(self.exchange.close)
        root = o.checkpoint_dir or default_root(str(run.address))
        self.shelf = CheckpointShelf(root, self.node)
        self.endpoint = encode_endpoint(self.node.address)
        self.events.emit("p2p_started", node_id=self.node_key.node_id.hex(), endpoint=self.endpoint)

    def _on_gossip(self, announcement: Announcement) -> None:
        self.exchange.on_message(announcement)

    def _check(self, payload: bytes):
        if self.trainer is None:
            raise ValueError("no model yet to check results against")
        return self.trainer.check(payload)

    def _install_signals(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, self.stop)

    def stop(self) -> None:
        """Leave after what is in flight (Ctrl-C, SIGTERM, or a program driving the client)."""
        if not self.stopping:
            self.events.emit("stopping")
        self.stopping = True
        self.new_state.set()
        self.changed.set()

    async def _leave(self) -> None:
        """On the way out: let in-flight rounds finish (bounded), then give our place back."""
        pending = [t for t in self.round_tasks.values() if not t.done()]
        if pending:
            await asyncio.wait(pending, timeout=30)
        run = self.latest
        if run is not None and any(e.signer == self.wallet.pubkey() for e in run.registry):
            with contextlib.suppress(CohortError):
                await self.chain.exit_run(self.wallet, run.address)
                self.events.emit("exited")

    def _spawn(self, coro: Awaitable[Any]) -> asyncio.Task:
        task = asyncio.ensure_future(coro)
        self.background.add(task)
        task.add_done_callback(self._reap)
        return task

    def _reap(self, task: asyncio.Task) -> None:
        self.background.discard(task)
        if not task.cancelled() and task.exception() is not None and not self.stopping:
            error = task.exception()
            self.events.emit("task_failed", error=f"{type(error).__name__}: {error}")
            if isinstance(error, ClientRefused):
                self.fatal = error
            self.new_state.set()

    # -- following the chain ----------------------------------------------------------------------------
    async def _follow(self) -> None:
        """The newest Run state, over websocket with polling fallback (RunClient.watch orders by nonce)."""
        assert self.latest is not None
        url, delay = self.rpc.url, 0.5
        while not self.stopping:
            try:
                async for run in self.chain.watch(self.latest.address, poll_interval=0.5, max_reconnect_delay=5):
                    delay = 0.5
                    if run.nonce > self.latest.nonce:
                        self.latest = run
                        self.new_state.set()
                        self.changed.set()
                    if self.rpc.url != url:
                        self.events.emit("rpc_fallback", was=url, now=self.rpc.url)
                        url = self.rpc.url
                self.events.emit("run_closed")
                self.stop()
                return
            except CohortError as e:  # every RPC down: keep trying, with backoff, until one answers
                self.events.emit("rpc_unavailable", error=str(e)[:200], retry_in=delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)

    def chain_now(self) -> int:
        return int(time.time() + self.time_offset)

    async def _main(self) -> ExitCode:
        seen = -1
        while True:
            if self.fatal is not None:
                raise self.fatal
            if self.stopping:
                return ExitCode.OK
            run = self.latest
            assert run is not None
            if run.nonce != seen:
                seen = run.nonce
                try:
                    await self._on_state(run)
                except ClientRefused:
                    raise
                except CohortError as e:  # the RPC failed us: handle this state again shortly
                    self.events.emit("rpc_error", state=str(run.state), error=str(e)[:300])
                    seen = -1
                    await asyncio.sleep(0.5)
                    continue
                if run.state == RunState.Finished:
                    self.events.emit("run_finished", step=run.progress.step)
                    return ExitCode.OK
            self.new_state.clear()
            if self.latest is not None and self.latest.nonce != seen:
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.new_state.wait(), 1.0)

    async def _on_state(self, run: Run) -> None:
        me = run.client(self.wallet.pubkey())
        self.events.emit("state", state=str(run.state), epoch=run.progress.epoch, step=run.progress.step,
                         seed_pending=run.seed_pending, nonce=run.nonce)  # fmt: skip
        self.events.status(phase=str(run.state), epoch=run.progress.epoch, step=run.progress.step,
                           clients=len(run.clients))  # fmt: skip
        if run.state == RunState.WaitingForMembers:
            # join while the epoch gathers, not earlier: a join sent during the last epoch would enlist us
            # even if we died since, and the next epoch would start with a dead member
            await self._join(run)
            self._end_epoch_work()
        elif run.state == RunState.Warmup:
            if me is not None and me.healthy and self.epoch != run.progress.epoch:
                await self._begin_epoch(run)
            if self.epoch == run.progress.epoch:
                await self._warmup(run)
        elif run.state in (RunState.RoundTrain, RunState.RoundWitness):
            if self.epoch != run.progress.epoch:
                return  # not a prepared member of this epoch: wait for the next one
            if me is None or not me.healthy:
                self._dropped(run, "we are no longer a healthy member of the epoch")
                return
            step = round_step(run)
            if step not in self.round_tasks and not (run.state == RunState.RoundWitness and run.seed_pending):
                self.round_tasks[step] = self._spawn(self._round(step))
            if run.state == RunState.RoundWitness and not run.seed_pending and step not in self.witnessed:
                self._spawn(self._witness(step, force=True))
        elif run.state == RunState.Cooldown:
            if self.epoch == run.progress.epoch and run.progress.epoch not in self.cooled:
                self.cooled.add(run.progress.epoch)
                self._spawn(self._cooldown(run.progress.epoch))
        elif run.state == RunState.Paused:
            self._end_epoch_work()
            self.events.emit("paused")

    # -- membership -----------------------------------------------------------------------------------
    async def _join(self, run: Run) -> None:
        entry = next((e for e in run.registry if e.signer == self.wallet.pubkey()), None)
        if entry is not None and entry.pending:
            return
        if self.stopping:
            return
        try:
            await self.chain.join_run(self.wallet, run.address, Keypair.from_seed(self.node_key.secret),
                                      self.endpoint)  # fmt: skip
        except ProgramError as e:
            if e.name in REFUSALS:
                raise ClientRefused(REFUSALS[e.name], f"cannot join run {run.run_id!r}: {e.msg}") from None
            if e.name in LOST_RACE:
                return
            raise
        except InsufficientFunds as e:
            raise ClientRefused(ExitCode.UNFUNDED, str(e)) from None
        self.events.emit("joined", epoch=run.progress.epoch, node_id=self.node_key.node_id.hex())

    def _end_epoch_work(self) -> None:
        for task in self.round_tasks.values():
            task.cancel()
        self.round_tasks.clear()
        self.exchange.reset()
        self.witnessed.clear()
        self.finished_sent.clear()
        self.ready_sent = self.warmup_witnessed = False
        self.epoch = None

    def _dropped(self, run: Run, why: str) -> None:
        if self.epoch is None:
            return
        self.events.emit("left_epoch", epoch=run.progress.epoch, step=run.progress.step, reason=why)
        self._end_epoch_work()
        self.weights_epoch = None  # our weights now differ from the epoch's: reload before training again

    async def _begin_epoch(self, run: Run) -> None:
        """Warmup of an epoch we are in: the model at this epoch's starting weights, the peers' addresses."""
        self._end_epoch_work()
        if self.trainer is None:
            self.trainer = await self.model_ready
        peers = await self._peer_addresses(run)
        saved = self.shelf.saved
        drift = self.weights_epoch == run.progress.epoch and saved is not None and drifted(run, saved.step, saved.manifest_hash)
        if drift:  # our weights at the epoch end differ from the committed checkpoint: take the checkpoint
            self.events.emit("replica_drift", epoch=run.progress.epoch, ours=saved.manifest_hash.hex(),
                             committed=run.model.checkpoint.weights_sha256.hex())  # fmt: skip
        if self.weights_epoch != run.progress.epoch or drift:
            if run.progress.epoch == 0 and run.progress.step == 1:
                if not await self._starting_weights(run):
                    await self._exit_epoch()
                    return
            elif not await self._load_checkpoint(run, peers):
                await self._exit_epoch()  # do not keep the others waiting for our Ready
                return
        self.node.set_clients(peers.values())  # re-keyed by the first round's seed when it exists
        self.peers = peers
        self.epoch = run.progress.epoch
        self.applied_through = run.progress.step - 1
        self.node.advance_round(run.progress.step)
        self.events.emit("epoch_started", epoch=run.progress.epoch, step=run.progress.step,
                         clients=len(run.clients), peers=len(peers))  # fmt: skip

    async def _starting_weights(self, run: Run) -> bool:
        """A new run's first weights: a Hub checkpoint (a repo or a local directory) when the run names one
        with its hash, else the weights every client derives from the run's address (already built)."""
        from ..checkpoint import CheckpointError

        assert self.trainer is not None
        pointer = run.model.checkpoint
        if pointer.kind in ("Hub", "P2P") and pointer.repo and pointer.weights_sha256 != bytes(32):
            try:
                path = await self.shelf.fetch_hub(pointer.repo, pointer.revision, pointer.weights_sha256)
                async with self.compute:
                    await asyncio.to_thread(self.trainer.load, path, pointer.weights_sha256)
            except (CheckpointError, OSError) as e:
                self.events.emit("no_weights", epoch=0, reason=str(e)[:300])
                return False
            self.events.emit("checkpoint_loaded", epoch=0, step=pointer.step, source=pointer.repo,
                             manifest=pointer.weights_sha256.hex(), digest=self.trainer.digest())  # fmt: skip
        elif pointer.kind in ("Gcs", "P2PGcs") and pointer.weights_sha256 != bytes(32):
            self.events.emit("no_weights", epoch=0, reason="this client does not read GCS checkpoints")
            return False
        self.weights_epoch = 0
        return True

    async def _load_checkpoint(self, run: Run, peers: dict[NodeId, PeerAddress]) -> bool:
        """A joiner's weights: the checkpoint the chain points at (the hash its checkpointers committed at
        the last epoch end), from the peers that hold it, verified before use."""
        from ..checkpoint import CheckpointError

        assert self.trainer is not None
        until = time.monotonic() + max(run.config.warmup_time / 2, 5)
        while True:  # the checkpoint transaction of the last Cooldown may still be on its way
            checkpoint = run.model.checkpoint
            if checkpoint.step == run.progress.step and checkpoint.weights_sha256 != bytes(32):
                break
            if time.monotonic() > until:
                self.events.emit("no_weights", epoch=run.progress.epoch,
                                 reason=f"the run points at no checkpoint of step {run.progress.step}")  # fmt: skip
                return False
            await self._wait(0.5)
            run = self.latest or run
        self.node.set_clients(peers.values())  # this epoch's members: they admit us and we them
        started = time.perf_counter()
        self.events.status(model=f"fetching checkpoint {checkpoint.weights_sha256.hex()[:12]}…")
        try:
            path = await self.shelf.fetch(checkpoint.weights_sha256, peers.values())
            async with self.compute:
                await asyncio.to_thread(self.trainer.load, path, checkpoint.weights_sha256)
        except (CheckpointError, OSError) as e:
            self.events.emit("no_weights", epoch=run.progress.epoch, reason=str(e)[:300])
            return False
        self.weights_epoch = run.progress.epoch
        self.events.emit("checkpoint_loaded", epoch=run.progress.epoch, step=checkpoint.step,
                         manifest=checkpoint.weights_sha256.hex(), digest=self.trainer.digest(),
                         seconds=round(time.perf_counter() - started, 3))  # fmt: skip
        return True

    async def _build_trainer(self, run: Run) -> Trainer:
        import torch  # the training stack loads only once there is something to train

        from .trainer import Trainer, initial_seed

        if self.options.threads:
            torch.set_num_threads(self.options.threads)
        started = time.perf_counter()
        self.events.status(model=f"building {self.spec.preset}…")
        try:
            trainer = await asyncio.to_thread(
                Trainer, self.spec, seed=initial_seed(bytes(run.address)), device=self.options.torch_device(),
                micro_batch_size=self.options.micro_batch_size,
            )  # fmt: skip
        except (ValueError, OSError, RuntimeError) as e:  # data errors and vocabulary mismatches included
            raise ClientRefused(ExitCode.DATA_UNAVAILABLE,
                                f"cannot build run {run.run_id!r}'s model and data here: {e}") from None  # fmt: skip
        params = sum(p.numel() for p in trainer.model.parameters())
        self.events.status(model=f"{self.spec.preset} ({params:,} parameters)")
        self.events.emit("model_loaded", preset=self.spec.preset, parameters=params, digest=trainer.digest(),
                         seconds=round(time.perf_counter() - started, 3), device=str(trainer.device))  # fmt: skip
        return trainer

    async def _peer_addresses(self, run: Run) -> dict[NodeId, PeerAddress]:
        endpoints = await self.chain.joined_endpoints(run.address)
        peers = {}
        for client in run.clients:
            node = NodeId(bytes(client.p2p_identity))
            if node == self.node_key.node_id:
                continue
            text = endpoints.get(client.p2p_identity)
            if text is None:
                self.events.emit("peer_unknown", index=client.index, node_id=node.hex())
                continue
            try:
                peers[node] = decode_endpoint(node, text)
            except ValueError as e:
                self.events.emit("peer_bad_endpoint", index=client.index, error=str(e))
        return peers

    async def _warmup(self, run: Run) -> None:
        """Say we are ready (again every second: peers that start later missed it); once every member
        is, send our warmup witness, so RoundTrain starts as soon as all are ready, not at the timeout."""
        me = run.client(self.wallet.pubkey())
        assert me is not None
        ready = self.exchange.ready
        ready.add(me.index)
        if not self.ready_sent:
            self.ready_sent = True
            self._spawn(self._announce_ready(run.progress.epoch, run.progress.step))
        healthy = {c.index for c in run.clients if c.healthy}
        if healthy <= ready and not self.warmup_witnessed:
            self.warmup_witnessed = True
            if await self._send("warmup_witness", self.chain.warmup_witness(self.wallet, run.address, me.index)):
                self.events.emit("warmup_witnessed", epoch=run.progress.epoch, ready=len(ready))

    async def _announce_ready(self, epoch: int, step: int) -> None:
        while not self.stopping and self.epoch == epoch:
            run = self.latest
            if run is None or run.state != RunState.Warmup or run.progress.epoch != epoch:
                return
            await self.node.announce(step, Ready(epoch).encode())
            for _ in range(10):
                await self._wait(0.1)
                if self.latest is not None and self.latest.state == RunState.Warmup:
                    await self._warmup_progress()

    async def _warmup_progress(self) -> None:
        run = self.latest
        if run is not None and run.state == RunState.Warmup and self.epoch == run.progress.epoch:
            await self._warmup(run)

    # -- one round --------------------------------------------------------------------------------------
    async def _round(self, step: int) -> None:
        run = self.latest
        assert run is not None and self.trainer is not None
        view = round_view(self.core, run)
        if view is None or view.step != step:
            return
        self.node.advance_round(step)
        if view.height == 0:  # key the overlay with a value nobody knew when they joined (no key grinding)
            self.node.set_clients(self.peers.values(), overlay_key=view.seed.to_bytes(8, "little"))
        if not await self._apply_through(step - 2):
            return
        me = run.client(self.wallet.pubkey())
        assert me is not None
        self._spawn(self._health_checks(run))
        batch = assignments(self.core, view).get(me.index)
        if batch is not None and trains(run, step) and view.active(me.index):
            async with self.compute:
                out = await asyncio.to_thread(self.trainer.train, step, *batch)
            commitment = self.node.add_blob(out.payload, step)
            book = self.exchange.keep_own(step, me.index, batch, commitment, out.payload)
            book.loss, book.tokens, book.seconds, book.trained = out.loss, out.tokens, out.seconds, True
            await self.node.announce(step, Result(step, *batch, commitment, len(out.payload)).encode())
            self.events.status(loss=f"{out.loss:.4f}", tok_s=f"{out.tokens / out.seconds:,.0f}",
                               peers=len(self.peers))  # fmt: skip
            self.events.emit("trained", step=step, loss=round(out.loss, 5), tokens=out.tokens,
                             seconds=round(out.seconds, 3), tokens_per_sec=round(out.tokens / out.seconds, 1),
                             batch=list(batch), bytes=len(out.payload))  # fmt: skip
        elif not trains(run, step):
            self.events.emit("flush_round", step=step)
        await self._finish(step)
        if step % EVAL_EVERY == 0:
            self._spawn(self._evaluate(step))
        if witness_position(self.core, run, view, me.index) is not None:
            await self._witness(step, force=False)

    async def _evaluate(self, step: int) -> None:
        """Held-out loss while we wait for the others (the GPU or CPU is idle then)."""
        assert self.trainer is not None
        async with self.compute:
            result = await asyncio.to_thread(self.trainer.evaluate, EVAL_SEQUENCES)
        self.last_eval = result
        self.events.emit("evaluated", step=step, loss=round(result.loss, 5), perplexity=round(result.perplexity, 3),
                         tokens=result.tokens)  # fmt: skip

    def _expected(self, run: Run, step: int) -> set[int]:
        """Trainers whose result of `step` should arrive (healthy, assigned, and the step not a flush)."""
        back = round_step(run) - step
        view = round_view(self.core, run, back) if back >= 0 else None
        if view is None or not trains(run, step):
            return set()
        healthy = {c.index for c in run.clients if c.healthy}
        return {i for i in assignments(self.core, view) if i in healthy and view.active(i)}

    def _holds_all(self, run: Run, step: int) -> bool:
        book = self.exchange.held(step)
        return self._expected(run, step) <= set(book.results if book else ())

    async def _finish(self, step: int) -> None:
        """Finished(step): we trained it and hold every result of step - 1 (waits until the round ends)."""
        while not self.stopping:
            run = self.latest
            assert run is not None
            if round_step(run) != step or run.state not in (RunState.RoundTrain, RunState.RoundWitness):
                return
            if self._holds_all(run, step - 1):
                break
            await self._wait()
        if step not in self.finished_sent:
            self.finished_sent.add(step)
            me = self.latest.client(self.wallet.pubkey()) if self.latest else None
            if me is not None:
                self.exchange.book(step).finished.add(me.index)
            await self.node.announce(step, Finished(step).encode())

    async def _witness(self, step: int, force: bool) -> None:
        """Send our witness of step - 1's results: once everyone said Finished(step), or when forced (the
        RoundWitness phase: a witness that waits any longer would miss the round)."""
        while not force and not self.stopping:
            run = self.latest
            assert run is not None
            if round_step(run) != step or run.state != RunState.RoundTrain:
                break
            active = {c.index for c in run.clients if c.healthy}
            if active <= self.exchange.book(step).finished:
                break
            await self._wait()
        run = self.latest
        assert run is not None
        view = round_view(self.core, run)
        me = run.client(self.wallet.pubkey())
        if step in self.witnessed or view is None or view.step != step or me is None or run.seed_pending:
            return
        position = witness_position(self.core, run, view, me.index)
        if position is None or run.state not in (RunState.RoundTrain, RunState.RoundWitness):
            return
        self.witnessed.add(step)
        previous = round_view(self.core, run, 1)
        assigned = assignments(self.core, previous) if previous is not None else {}
        participants, salt, bloom = participants_and_bloom(self.core, self.exchange.held(step - 1), assigned)
        book = self.exchange.book(step)
        stats = self.node.transport.stats
        metadata = {
            "loss": float(book.loss or 0.0),
            "tokens_per_sec": float(book.tokens / book.seconds) if book.seconds else 0.0,
            "bytes_sent": int(getattr(self.node.blob_server, "bytes_served", 0) + stats.request_bytes_sent),
            "bytes_received": int(self.exchange.bytes_received),
            "eval_loss": float(self.last_eval.loss) if self.last_eval else 0.0,
            "eval_tokens": int(self.last_eval.tokens) if self.last_eval else 0,
        }
        args = {"step": step, "index": me.index, "position": position, "participants": participants,
                "bloom_salt": salt, "broadcast_bloom": bloom, "metadata": metadata}  # fmt: skip
        if await self._send("witness", self.chain.witness(self.wallet, run.address, args)):
            self.events.emit("witnessed", step=step, position=position, forced=force,
                             attested=bin(int.from_bytes(participants, "little")).count("1"))  # fmt: skip

    async def _health_checks(self, run: Run) -> None:
        """If we witnessed the previous round, report the clients its witnesses did not see (batched)."""
        me = run.client(self.wallet.pubkey())
        previous = round_view(self.core, run, 1)
        if me is None or previous is None or not any(w.index == me.index for w in previous.witnesses):
            return
        bad = unhealthy(self.core, run)
        for start in range(0, len(bad), 32):
            chunk = bad[start : start + 32]
            if await self._send("health_check", self.chain.health_check(self.wallet, run.address, chunk)):
                self.events.emit("health_check", step=run.progress.step, dropped=chunk)

    async def _apply_through(self, target: int) -> bool:
        """Apply every attested step up to `target`, in order; False if we had to leave the epoch."""
        async with self.applying:
            return await self._apply_steps(target)

    async def _apply_steps(self, target: int) -> bool:
        while self.applied_through < target:
            if self.epoch is None:
                return False
            step = self.applied_through + 1
            run = self.latest
            assert run is not None and self.trainer is not None
            witnessed = round_view(self.core, run, round_step(run) - (step + 1))
            if witnessed is None or witnessed.step != step + 1:
                self._dropped(run, f"the chain no longer holds the witnesses of step {step}")
                await self._exit_epoch()
                return False
            decided = await self._await_consensus(step, witnessed)
            if decided is None:
                return False
            started = time.perf_counter()
            if decided:
                async with self.compute:
                    await asyncio.to_thread(self.trainer.apply, step, list(decided.values()))
            self.applied_through = step
            self.events.emit("applied", step=step, results=len(decided),
                             seconds=round(time.perf_counter() - started, 4))  # fmt: skip
        return True

    async def _await_consensus(self, step: int, witnessed: RoundView) -> dict[int, bytes] | None:
        """The results of `step` a quorum attested, once we hold them all. A result we cannot get
        before the round's deadline makes us leave rather than apply something else than our peers."""
        run = self.latest
        assert run is not None
        until = time.monotonic() + max(run.config.max_round_train_time, 5)
        while True:
            run = self.latest
            assert run is not None
            decided = consensus(self.core, run, witnessed, self.exchange.held(step))
            if not decided.missing:
                return decided.accepted
            if time.monotonic() > until or self.stopping:
                self._dropped(run, f"attested results of step {step} from clients {list(decided.missing)} "
                                   "could not be fetched in time")  # fmt: skip
                await self._exit_epoch()
                return None
            await self._wait()

    async def _exit_epoch(self) -> None:
        run = self.latest
        if run is not None:
            await self._send("exit_run", self.chain.exit_run(self.wallet, run.address))

    async def _cooldown(self, epoch: int) -> None:
        """The epoch is over: catch up on what the last rounds attested, then report our weights."""
        run = self.latest
        assert run is not None and self.trainer is not None
        if not await self._apply_through(round_step(run) - 2):
            return
        for task in list(self.round_tasks.values()):
            if task is not asyncio.current_task():
                task.cancel()
        self.weights_epoch = epoch + 1
        self.epoch = None
        self.events.emit("epoch_end", epoch=epoch, step=run.progress.step, applied=self.applied_through,
                         digest=self.trainer.digest())  # fmt: skip
        await self._checkpoint(run, epoch)

    async def _checkpoint(self, run: Run, epoch: int) -> None:
        """Every finisher writes the epoch's weights (in the background) and serves them to joiners; the
        run's checkpointers also commit the checkpoint's manifest hash on chain."""
        assert self.trainer is not None
        info = await self.shelf.save(self.trainer.model, run_id=run.run_id, step=run.progress.step, epoch=epoch,
                                     lock=self.compute)  # fmt: skip
        self.events.emit("checkpoint_saved", epoch=epoch, step=info.step, path=str(info.path),
                         manifest=info.manifest_hash.hex())  # fmt: skip
        if self.wallet.pubkey() in run.checkpointers:
            pointer = run.model.checkpoint
            checkpoint = Checkpoint(kind="Hub", repo=pointer.repo or run.run_id, step=info.step,
                                    revision=pointer.revision, weights_sha256=info.manifest_hash)  # fmt: skip
            if await self._send("checkpoint", self.chain.checkpoint(self.wallet, run.address, checkpoint)):
                self.events.emit("checkpoint_committed", step=info.step, manifest=info.manifest_hash.hex())

    # -- ticks ------------------------------------------------------------------------------------------
    async def _tick_loop(self) -> None:
        """Tick when a phase is due. Clients wait in turn (by epoch or registry position) before sending,
        so N clients do not all send the same tick; one that lost the race is no error."""
        while not self.stopping:
            run = self.latest
            assert run is not None
            now = self.chain_now()
            state = bytearray(run.data[8:])
            if not run.state.halted and self.core.tick(state, Env(now, bytes(32), run.address)) == 0:
                await asyncio.sleep(0.4 * self._turn(run))
                if self.latest is run and not self.stopping:
                    if await self._send("tick", self.chain.tick(self.wallet, run.address)):
                        self.events.emit("ticked", state=str(run.state), step=run.progress.step)
                        await self._wait(0.5)
                    else:  # lost the race, or a pending seed's slot is not over yet: look again soon
                        await asyncio.sleep(0.15)
                    continue
            await self._wait(0.25)

    def _turn(self, run: Run) -> int:
        me = run.client(self.wallet.pubkey())
        if me is not None:
            return me.index % 8
        for i, entry in enumerate(run.registry):
            if entry.signer == self.wallet.pubkey():
                return i % 8
        return 8

    # -- plumbing ---------------------------------------------------------------------------------------
    async def _send(self, what: str, request: Awaitable[Any]) -> bool:
        """Send a transaction; a lost race is not an error, anything else is logged and survived."""
        try:
            await request
            return True
        except ProgramError as e:
            if e.name not in LOST_RACE:
                self.events.emit("tx_refused", what=what, error=e.name, message=e.msg)
        except CohortError as e:
            self.events.emit("tx_failed", what=what, error=str(e)[:300])
        return False

    async def _wait(self, seconds: float = POLL) -> None:
        self.changed.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.changed.wait(), seconds)
