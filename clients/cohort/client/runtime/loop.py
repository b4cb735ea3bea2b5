"""The training client: follow the run on chain, feed the state machine, carry out what it decides.

    connect      wallet, RPC, the run (refusals are one line and an exit code), P2P node, model worker
    follow       the run's state over websocket (its hot prefix only, during rounds), supervised
    loop         every event -> machine.handle -> actions -> effects, which post events back

`await Client(options).run()` returns an exit code. The decisions are in machine/ (pure, unit-tested);
what each action does is in effects.py; this file only wires them together.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from solders.keypair import Keypair
from solders.pubkey import Pubkey

from cohort.sdk.client import RunClient
from cohort.sdk.coordinator_core import CoordinatorCore
from cohort.sdk.errors import CohortError
from cohort.sdk.models import Run
from cohort.sdk.presets import TrainingSpec
from cohort.sdk.rpc import Rpc

from ..p2p import NodeKey, P2PNode
from .collector import collect_on_the_loop
from .connect import ChainLink, PeerSide, build_trainer, connect, install_signals, start_p2p
from .effects import Effects
from .events import Events
from .exchange import Exchange
from .machine import ChainUpdate, ClientMachine, Finish, RunClosed, StopRequested, TimerFired
from .options import ClientOptions, ClientRefused, ExitCode
from .replica import PayloadHeader, Replica
from .rounds import observe
from .weights import CheckpointShelf
from .worker import ModelWorker

TIMER = 0.2  # seconds: the machine hears the time pass at least this often


class Client:
    """Handles to the chain, peers and model, and the inbox the machine reads; no decisions are kept here."""

    # the handles connect.py made (ChainLink, PeerSide), kept here before the loop starts
    core: CoordinatorCore
    rpc: Rpc
    chain: RunClient
    wallet: Keypair
    run_address: Pubkey
    spec: TrainingSpec
    node_key: NodeKey
    node: P2PNode
    endpoint: str
    worker: ModelWorker
    exchange: Exchange
    shelf: CheckpointShelf
    trainer_ready: asyncio.Future[Replica]  # the model side, once built (connect.build_trainer)
    machine: ClientMachine
    effects: Effects

    def __init__(self, options: ClientOptions, events: Events | None = None) -> None:
        self.options = options
        self.events = events or Events(options.events, options.logs, name=options.name)
        self.inbox: asyncio.Queue = asyncio.Queue()
        self.latest: Run | None = None  # the newest Run state seen
        self.time_offset = 0.0  # chain clock - local clock
        self.refusal: str | None = None
        self._shown: tuple | None = None  # the phase last reported as a `state` event

    def post(self, event: object) -> None:
        self.inbox.put_nowait(event)

    def stop(self) -> None:
        """Leave after what is in flight (Ctrl-C, SIGTERM, or a program driving the client)."""
        self.events.emit("stopping")
        self.post(StopRequested())

    def chain_now(self) -> float:
        return time.time() + self.time_offset

    # -- the loop -----------------------------------------------------------------------------------
    async def run(self) -> ExitCode:
        try:
            async with contextlib.AsyncExitStack() as stack:
                self._open_metrics()
                link = await connect(self.options, self.events, stack)
                self._keep_chain(link)
                peers = await start_p2p(self.options, link, self.events, self.post, self._check,
                                        self._payload_size, stack)  # fmt: skip
                self._keep_peers(peers)
                self.machine = ClientMachine(self.core, self.wallet.pubkey())
                self.effects = Effects(self)
                stack.push_async_callback(self.effects.close)
                self.trainer_ready = asyncio.ensure_future(
                    build_trainer(self.options, link, peers, self.events, self.post)
                )
                stack.callback(self.trainer_ready.cancel)
                install_signals(self.stop)
                collector = asyncio.ensure_future(collect_on_the_loop())
                stack.callback(collector.cancel)
                follower = asyncio.ensure_future(self._follow())
                stack.callback(follower.cancel)
                return await self._loop()
        except ClientRefused as refusal:
            self.refusal = str(refusal)
            self.events.emit("refused", code=int(refusal.code), reason=str(refusal))
            return refusal.code
        finally:
            self.events.close()

    def _keep_chain(self, link: ChainLink) -> None:
        self.wallet, self.core, self.rpc, self.chain = link.wallet, link.core, link.rpc, link.chain
        self.latest, self.run_address, self.spec = link.run, link.run.address, link.spec
        self.time_offset = link.time_offset

    def _keep_peers(self, peers: PeerSide) -> None:
        self.node_key, self.node, self.endpoint = peers.node_key, peers.node, peers.endpoint
        self.worker, self.exchange, self.shelf = peers.worker, peers.exchange, peers.shelf

    def _check(self, payload: bytes) -> PayloadHeader:
        """A peer's payload checked by our model's codec (refused until the model is built)."""
        if not self.trainer_ready.done():
            raise ValueError("no model yet to check results against")
        return self.trainer_ready.result().check(payload)

    def _payload_size(self) -> int:
        return self.trainer_ready.result().payload_size if self.trainer_ready.done() else 0

    def _open_metrics(self) -> None:
        """--metrics / --metrics-port: sinks that see every event from here on (closed with the events)."""
        from .metrics import open_sinks

        o = self.options
        try:
            sinks = open_sinks(o.metrics_dir, o.metrics_port)
        except ValueError as e:
            raise ClientRefused(ExitCode.USAGE, str(e)) from None
        self.events.sinks += sinks
        for sink in sinks:
            if hasattr(sink, "port"):
                self.events.emit("metrics_served", url=f"http://127.0.0.1:{sink.port}/metrics")

    async def _loop(self) -> ExitCode:
        while True:
            try:
                event = await asyncio.wait_for(self.inbox.get(), TIMER)
            except TimeoutError:
                event = TimerFired()
            if isinstance(event, ClientRefused):
                raise event
            if isinstance(event, ChainUpdate):
                self.exchange.set_view(event.view)
            for action in self.machine.handle(event, time.monotonic(), self.chain_now()):
                if isinstance(action, Finish):
                    await self._finish()
                    return action.code
                self.effects.carry_out(action)

    async def _finish(self) -> None:
        """What is in flight (an exit_run, the last checkpoint) gets a bounded time to complete."""
        pending = [t for t in self.effects.tasks if not t.done()]
        if pending:
            await asyncio.wait(pending, timeout=30)
        self.worker.close()

    # -- following the chain ------------------------------------------------------------------------
    async def _follow(self) -> None:
        """The newest Run state, ordered by nonce (RunClient.watch), its hot prefix only while rounds run.
        Supervised: any failure (RPC outage, an answer that does not decode) restarts it with backoff;
        "closed" needs the account absent on several reads in a row (watch checks)."""
        delay, url, seen = 0.5, self.rpc.url, -1
        while True:
            try:
                async for run in self.chain.watch(
                    self.run_address, poll_interval=0.5, max_reconnect_delay=5, hot=True
                ):
                    delay = 0.5
                    if run.nonce > seen:
                        seen = run.nonce
                        self.latest = run
                        self._emit_state(run)
                        self.post(ChainUpdate(observe(self.core, run, self.wallet.pubkey())))
                    if self.rpc.url != url:
                        self.events.emit("rpc_fallback", was=url, now=self.rpc.url)
                        url = self.rpc.url
                self.post(RunClosed())
                return
            except asyncio.CancelledError:
                raise
            except CohortError as e:
                self.events.emit("rpc_unavailable", error=str(e)[:200], retry_in=delay)
            except Exception as e:  # a bug or a malformed answer: say so, and follow again
                self.events.emit(
                    "follower_restarted", error=f"{type(e).__name__}: {e}"[:300], retry_in=delay
                )
            await asyncio.sleep(delay)
            delay = min(delay * 2, 10.0)

    def _emit_state(self, run: Run) -> None:
        if (run.state, run.progress.step, run.seed_pending) == self._shown:
            return
        self._shown = (run.state, run.progress.step, run.seed_pending)
        self.events.emit("state", state=str(run.state), epoch=run.progress.epoch, step=run.progress.step,
                         seed_pending=run.seed_pending, nonce=run.nonce)  # fmt: skip
        self.events.status(phase=str(run.state), epoch=run.progress.epoch, step=run.progress.step,
                           clients=len(run.clients))  # fmt: skip
