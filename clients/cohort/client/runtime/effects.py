"""Carrying out the state machine's actions: transactions, peers, the model. Each action starts at most one
task, whose outcome comes back to the machine as an event; nothing here decides anything.

Every task is supervised: an unexpected error is reported as an event (tx_failed, task_failed) and the
machine decides what follows, so no failure of the RPC, a peer or a job can stop the client silently.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, assert_never

from solders.keypair import Keypair

from cohort.sdk.errors import CohortError, InsufficientFunds, ProgramError
from cohort.sdk.models import Run, RunConfig

from ..p2p import BlobFetchError, Manifest, NodeId, PeerAddress
from ..verify.sample import PartsOnDisk, sample_seed
from ..verify.state import PART_SIZE, StateError
from .machine import (
    Action,
    Allow,
    AnnounceReady,
    Applied,
    Apply,
    ApplyFailed,
    Check,
    Checked,
    Emit,
    EpochPrepared,
    Fetch,
    FetchList,
    Finish,
    HealthCheck,
    Join,
    LeaveEpoch,
    PrepareEpoch,
    Publish,
    ReadRecords,
    RecordsRead,
    ReleaseState,
    ReportCheck,
    ReportEquivocation,
    SaveCheckpoint,
    Saved,
    ServeList,
    SubmitWitness,
    Tick,
    Train,
    Trained,
    TrainFailed,
    Transaction,
    TxDone,
    VoteWeights,
    WarmupWitness,
    tx_name,
)
from .messages import Ready
from .peers import decode_endpoint
from .rounds import round_step
from .trainer import KEPT_STATES

if TYPE_CHECKING:
    from .host import ClientHost
    from .replica import Replica

EVAL_EVERY = 10  # steps between held-out evaluations
EVAL_SEQUENCES = 32  # validation sequences per evaluation (the same ones on every client)
# steps of results and our own states kept for the verifiers the seed may draw and the committee of a dispute
# a failed check opens (its seed is out by the round of s + 6 or so: CHECK_SEED_LAG 4, DISPUTE_SEED_LAG 3)
KEPT_FOR_CHECKS = 10
# A check's fetch of a trainer's committed states: the two manifests, then the parts its sample reads (the
# sign plane and a few bands), given time in proportion to the bytes asked at the rate every member of the run
# must sustain (its config's check_rate_kib), and PART_TRIES tries per part before the trainer is reported.
MANIFEST_DEADLINE = 30.0
CHECK_SLACK = 30.0
CHECK_PARALLEL = (
    2  # parts fetched at once from the trainer (each must keep up with the fetcher's minimum rate)
)
CHECK_IN_FLIGHT = (
    1 << 20
)  # bytes of parts a check asks for at once (small parts: more of them at once)
CHECK_STRIPE_MIN = 256 << 10  # parts from this size up come striped over the fetcher's lanes
PART_TRIES = 3
PART_RETRY_PAUSE = (
    1.0  # seconds before a part is asked again (a connection that broke is dialled anew)
)
STATE_EXTRA_ROUNDS = (
    KEPT_STATES - KEPT_FOR_CHECKS - 1
)  # our committed states outlive our results by this
# steps past a step s from which a trainer may have collected the committed states a check of s reads: the
# one before s goes first (kept for round s - 1 + STATE_EXTRA_ROUNDS, collected by the trainer's apply of step
# s + 16, once the run is at s + 17 or later), with a margin for views that differ by a round or two
STATE_HELD_FOR = KEPT_FOR_CHECKS + STATE_EXTRA_ROUNDS - 1
CHECKPOINT_RETRY = (
    1.0  # seconds between a joiner's checkpoint fetches while its peers may not have let it in
)


def check_rate(run: Run | None) -> float:
    """Bytes per second a trainer must serve a check's parts at: its run's check_rate_kib."""
    kib = run.config.check_rate_kib if run is not None else RunConfig.check_rate_kib
    return float(kib << 10)


class Timed:
    """A job for the model worker that notes how long it waited in the worker's queue (`waited`) and how
    long it ran (`seconds`): the delay checks add to our own steps, and a check's cost, for the events."""

    def __init__(self, job: Callable[..., Any]) -> None:
        self.job, self.asked = job, time.perf_counter()
        self.waited = self.seconds = 0.0

    def __call__(self, *args: Any) -> Any:
        started = time.perf_counter()
        self.waited = started - self.asked
        try:
            return self.job(*args)
        finally:
            self.seconds = time.perf_counter() - started


class Effects:
    def __init__(self, client: ClientHost) -> None:
        self.c = client
        self.tasks: set[asyncio.Task] = set()
        self.payloads: dict[bytes, bytes] = {}  # our own results until published
        self.own: dict[int, bytes] = {}  # step -> our result's commitment (recent steps)
        self.own_states: dict[
            int, bytes
        ] = {}  # step -> the manifest hash of our committed state, while served
        self.addresses: dict[int, Any] = {}  # epoch index -> PeerAddress of this epoch's members
        self.last_loss: tuple[float, int, float] | None = (
            None  # loss, tokens, seconds of our last step
        )
        self.last_eval = None

    def carry_out(self, action: Action) -> None:
        """Start what `action` asks (a type checker sees that every action is handled)."""
        match action:
            case Join():
                self._join(action)
            case LeaveEpoch():
                self.spawn(self.leave(action), "leave")
            case PrepareEpoch():
                self.spawn(self._prepare(action), "prepare")
            case Allow():
                self.c.exchange.set_peers(self.addresses, action.members, action.overlay_key)
            case AnnounceReady():
                self._announce_ready(action)
            case WarmupWitness():
                self._warmup_witness(action)
            case Train():
                self.spawn(self._train(action), "train")
            case Publish():
                self._publish(action)
            case Apply():
                self.spawn(self._apply(action), "apply")
            case SaveCheckpoint():
                self.spawn(self._save(action), "checkpoint")
            case Fetch():
                self.c.exchange.fetch(
                    action.step, action.sender, action.commitment, action.batch, action.decided
                )
            case FetchList():
                self.c.exchange.fetch_list(action.step, action.root, action.holders, action.clients)
            case ServeList():
                self.c.exchange.keep_list(action.results)
            case SubmitWitness():
                self._submit_witness(action)
            case ReadRecords():
                self.spawn(self._read_records(action), "records")
            case HealthCheck():
                self._health_check(action)
            case ReportEquivocation():
                self._report_equivocation(action)
            case Check():
                self.spawn(self._check(action), "check")
            case ReleaseState():
                if (manifest := self.own_states.pop(action.step, None)) is not None:
                    self.c.node.release_directory(manifest)  # removed at the next apply's collect
            case ReportCheck():
                self._report_check(action)
            case Tick():
                self._tx(action, lambda: self.c.chain.tick(self.c.wallet, self.c.run_address))
            case VoteWeights():
                self._vote_weights(action)
            case Emit():
                self.c.events.emit(action.event, **action.fields)
            case Finish():
                pass  # the loop handles it
            case _:
                assert_never(action)

    # -- plumbing -----------------------------------------------------------------------------------
    def spawn(self, coro: Awaitable[Any], what: str) -> asyncio.Task:
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(lambda t: self._reap(t, what))
        return task

    def _reap(self, task: asyncio.Task, what: str) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            error = task.exception()
            self.c.events.emit(
                "task_failed", what=what, error=f"{type(error).__name__}: {error}"[:300]
            )

    def _tx(self, action: Transaction, request: Callable[[], Awaitable[Any]]) -> None:
        """Send a transaction; its outcome comes back as a TxDone carrying `action`."""
        kind = tx_name(action)

        async def send() -> None:
            try:
                await request()
            except ProgramError as e:
                self.c.post(TxDone(action, False, e.name))
            except InsufficientFunds:
                self.c.post(TxDone(action, False, "InsufficientFunds"))
            except CohortError as e:
                self.c.events.emit("rpc_error", what=kind, error=str(e)[:300])
                self.c.post(TxDone(action, False, "rpc"))
            else:
                self.c.post(TxDone(action, True))

        self.spawn(send(), kind)

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    # -- membership ---------------------------------------------------------------------------------
    def _join(self, action: Join) -> None:
        c = self.c
        self._tx(action, lambda: c.chain.join_run(c.wallet, c.run_address, Keypair.from_seed(c.node_key.secret),
                                                     c.endpoint, throughput=action.throughput))  # fmt: skip

    async def leave(self, action: LeaveEpoch) -> None:
        """Leave the epoch: exit_run first (so the chain stops counting on us at once), then stop our
        model work and forget the epoch's peers and fetches."""
        c = self.c
        run = c.latest
        if run is not None and any(e.signer == c.wallet.pubkey() for e in run.registry):
            try:
                await c.chain.exit_run(c.wallet, c.run_address)
                c.events.emit("exited", reason=action.reason)
            except CohortError as e:
                c.events.emit("tx_failed", what="exit_run", error=str(e)[:300])
        c.worker.abort()
        c.exchange.reset()
        c.post(TxDone(action, True))

    async def _prepare(self, action: PrepareEpoch) -> None:
        """This epoch's peers (their Endpoint accounts) and starting weights (ours, the run's first, or the
        checkpoint the majority voted, from peers), verified before use."""
        c = self.c
        try:
            trainer = await c.trainer_ready
            run = c.latest
            assert run is not None
            self.addresses = await self._peer_addresses(run)
            c.exchange.set_peers(self.addresses, tuple(self.addresses), None)
            if action.load == "start":
                ok, reason = await self._starting_weights(run)
            elif action.load == "checkpoint":
                ok, reason = await self._load_checkpoint(action.epoch)
            else:
                ok, reason = True, ""
            if ok:
                await c.worker.run(trainer.start_epoch, run.progress.step, run.cold_start_epoch,
                                   run.config.verification_percent > 0)  # fmt: skip
                digest = await c.worker.run(trainer.checksum)
                c.post(EpochPrepared(action.epoch, True, digest))
            else:
                c.post(EpochPrepared(action.epoch, False, reason=reason))
        except CohortError as e:
            c.post(EpochPrepared(action.epoch, False, reason=f"RPC: {e}"))

    async def _starting_weights(self, run: Any) -> tuple[bool, str]:
        """A new run's first weights: a Hub checkpoint (a repo or a local directory) when the run names one
        with its hash, else the weights every client derives from the run's address (already built)."""
        from ..checkpoint import CheckpointError

        c = self.c
        trainer = await c.trainer_ready
        pointer = run.model.checkpoint
        if pointer.kind in ("Hub", "P2P") and pointer.repo and pointer.weights_sha256 != bytes(32):
            try:
                path = await c.shelf.fetch_hub(
                    pointer.repo, pointer.revision, pointer.weights_sha256
                )
                await c.worker.run(trainer.load, path, pointer.weights_sha256)
            except (CheckpointError, OSError) as e:
                return False, str(e)
            c.events.emit("checkpoint_loaded", epoch=0, step=pointer.step, source=pointer.repo,
                          manifest=pointer.weights_sha256.hex(), digest=await c.worker.run(trainer.digest))  # fmt: skip
        elif pointer.kind in ("Gcs", "P2PGcs") and pointer.weights_sha256 != bytes(32):
            return False, "this client does not read GCS checkpoints"
        return True, ""

    async def _load_checkpoint(self, epoch: int) -> tuple[bool, str]:
        """A joiner's weights: the checkpoint the chain points at (the hash the last epoch's finishers
        voted by majority), from the peers that hold it, verified before use."""
        from ..checkpoint import CheckpointError

        c = self.c
        trainer = await c.trainer_ready
        run = c.latest
        assert run is not None
        until = time.monotonic() + max(run.config.warmup_time / 2, 5)
        while True:  # the last Cooldown's votes may still be on their way
            run = c.latest
            assert run is not None
            checkpoint = run.model.checkpoint
            if checkpoint.step == run.progress.step and checkpoint.weights_sha256 != bytes(32):
                break
            if time.monotonic() > until:
                return False, f"the run points at no checkpoint of step {run.progress.step}"
            await asyncio.sleep(0.5)
        started = time.perf_counter()
        c.events.status(model=f"fetching checkpoint {checkpoint.weights_sha256.hex()[:12]}…")
        until = time.monotonic() + max(run.config.warmup_time / 2, 5)
        # the Hub copy a checkpointer pointed the record at: tried when no peer is left to ask, or once
        # the peers had their time (a record that still names the run's first repo just fails to verify)
        hub = (
            (checkpoint.repo, checkpoint.revision)
            if checkpoint.kind in ("Hub", "P2P") and checkpoint.repo
            else None
        )
        while (
            True
        ):  # at an epoch's start our peers may not have let us in yet (they follow our join)
            last = hub is not None and (not self.addresses or time.monotonic() > until)
            try:
                path = await c.shelf.fetch(checkpoint.weights_sha256, self.addresses.values(),
                                           hub=hub if last else None)  # fmt: skip
                break
            except (CheckpointError, OSError) as e:
                if last or (time.monotonic() > until and hub is None):
                    return False, str(e)
                c.events.emit("checkpoint_retry", epoch=epoch, error=str(e)[:300])
                await asyncio.sleep(CHECKPOINT_RETRY)
        try:
            await c.worker.run(trainer.load, path, checkpoint.weights_sha256)
        except (CheckpointError, OSError) as e:
            return False, str(e)
        c.events.emit("checkpoint_loaded", epoch=epoch, step=checkpoint.step, manifest=checkpoint.weights_sha256.hex(),
                      digest=await c.worker.run(trainer.digest), seconds=round(time.perf_counter() - started, 3))  # fmt: skip
        return True, ""

    async def _peer_addresses(self, run: Any) -> dict[int, Any]:
        c = self.c
        endpoints = await c.chain.endpoints(run)
        out = {}
        for client in run.clients:
            node = NodeId(bytes(client.p2p_identity))
            if node == c.node_key.node_id:
                continue
            text = endpoints.get(client.p2p_identity)
            if text is None:
                c.events.emit("peer_unknown", index=client.index, node_id=node.hex())
                continue
            try:
                out[client.index] = decode_endpoint(node, text)
            except ValueError as e:
                c.events.emit("peer_bad_endpoint", index=client.index, error=str(e))
        return out

    def _announce_ready(self, action: AnnounceReady) -> None:
        c = self.c
        self.spawn(c.node.announce(c.latest.progress.step, Ready(action.epoch).encode()), "ready")  # type: ignore[union-attr]

    def _warmup_witness(self, action: WarmupWitness) -> None:
        c = self.c
        self._tx(action, lambda: c.chain.warmup_witness(c.wallet, c.run_address, action.index))

    # -- the model ----------------------------------------------------------------------------------
    async def _train(self, action: Train) -> None:
        c = self.c
        trainer = await c.trainer_ready
        train = Timed(trainer.train)
        try:
            out = await c.worker.run_abortable(train, action.step, *action.batch)
        except Exception as e:  # an abort, or the data source failed us
            c.post(TrainFailed(action.epoch, action.step, f"{type(e).__name__}: {e}"[:300]))
            return
        commitment = hashlib.sha256(out.payload).digest()
        self.payloads[commitment] = out.payload
        if (
            out.state is not None
        ):  # the run verifies: our state after this step, served from disk under its hash
            # kept as long as the replica keeps it (KEPT_STATES steps), well past its results: a check of it may
            # start late behind slow links and busy verifiers, and it costs disk, not memory
            self.own_states[action.step] = c.node.keep_directory(
                out.state.root, out.state.manifest, action.step + STATE_EXTRA_ROUNDS
            )
            for old in [s for s in self.own_states if s <= action.step - KEPT_STATES]:
                del self.own_states[old]  # collected by its round by now
        self.own[action.step] = commitment
        for old in [s for s in self.own if s < action.step - 8]:
            del self.own[old]
        self.last_loss = (out.loss, out.tokens, out.seconds)
        c.events.status(step=action.step, loss=f"{out.loss:.4f}", tok_s=f"{out.tokens / out.seconds:,.0f}",
                        peers=len(self.addresses))  # fmt: skip
        c.post(Trained(action.epoch, action.step, action.batch, commitment, len(out.payload), out.loss, out.tokens,
                       out.seconds, train.waited))  # fmt: skip
        if action.step % EVAL_EVERY == 0:
            self.spawn(self._evaluate(action.step), "evaluate")

    async def _evaluate(self, step: int) -> None:
        c = self.c
        trainer = await c.trainer_ready

        def evaluate():  # timed on the worker: the time the model was busy, not the wait for it
            started = time.perf_counter()
            return trainer.evaluate(EVAL_SEQUENCES), time.perf_counter() - started

        result, seconds = await c.worker.run(evaluate)
        self.last_eval = result
        c.events.emit("evaluated", step=step, loss=round(result.loss, 5), perplexity=round(result.perplexity, 3),
                      tokens=result.tokens, seconds=round(seconds, 4))  # fmt: skip

    def _publish(self, action: Publish) -> None:
        payload = self.payloads.pop(action.commitment)
        self.spawn(
            self.c.exchange.publish(action.step, action.batch, action.commitment, payload),
            "publish",
        )

    async def _apply(self, action: Apply) -> None:
        c = self.c
        trainer = await c.trainer_ready
        payloads = [c.node.blob(commitment) for commitment in action.commitments]
        if any(p is None for p in payloads):  # the machine asks only for what we hold: a bug if not
            raise RuntimeError(
                f"step {action.step}: a decided result is no longer in the blob store"
            )

        def apply() -> int:
            trainer.apply(action.step, payloads)
            return trainer.checksum()

        job = Timed(apply)  # timed on the worker: it may queue behind training or a check's replay
        try:
            digest = await c.worker.run(job)
        except (
            Exception
        ) as e:  # a half-applied step: the machine leaves the epoch rather than wait for ever
            c.post(ApplyFailed(action.epoch, action.step, f"{type(e).__name__}: {e}"[:300]))
            raise
        # kept for the verifiers the seed may draw, and for peers behind us: a client whose view of the chain
        # jumped finds each decision in the chain's DECISION_WINDOW (8 rounds) and its results here
        c.node.collect(action.step - 1 - KEPT_FOR_CHECKS)
        c.post(Applied(action.epoch, action.step, len(payloads), digest))
        c.events.emit("apply_time", step=action.step, seconds=round(job.seconds, 4),
                      waited=round(job.waited, 4))  # fmt: skip
        # gossip's trouble says why a result may not arrive; requests, not bytes, are what a peer's CPU pays for
        stats = c.node.stats()
        own = self.own.get(action.step)
        uploads = c.node.copies_served(own) if own is not None else None
        c.events.emit("traffic", step=action.step, sent=stats.sent, received=stats.received, own_uploads=uploads,
                      gossip=stats.gossip_trouble, requests=stats.requests, dials=stats.dials,
                      peers=len(self.addresses))  # fmt: skip

    async def _save(self, action: SaveCheckpoint) -> None:
        c = self.c
        trainer = await c.trainer_ready
        run = c.latest
        assert run is not None
        info = await c.shelf.save(trainer, run_id=run.run_id, step=action.step, epoch=action.epoch)
        digest = await c.worker.run(trainer.digest)
        c.post(Saved(action.epoch, action.step, info.manifest_hash, digest))
        if (
            c.options.hub_repo is not None
        ):  # a checkpointer: the Hub too, and the chain's record pointed at it
            from ..checkpoint import HubUpload
            from .hub_publish import publish_to_hub

            hub = HubUpload.from_options(c.options.hub_repo)
            assert hub is not None
            self.spawn(publish_to_hub(c, hub, info, action.epoch, action.step), "hub_upload")

    # -- peers --------------------------------------------------------------------------------------
    # -- transactions -------------------------------------------------------------------------------
    def _submit_witness(self, action: SubmitWitness) -> None:
        c = self.c
        c.exchange.keep_list(action.results)
        loss, tokens, seconds = self.last_loss or (0.0, 0, 0.0)
        metadata = {
            "loss": float(loss),
            "tokens_per_sec": float(tokens / seconds) if seconds else 0.0,
            "bytes_sent": int(c.node.stats().uploaded),
            "bytes_received": int(c.exchange.bytes_received),
            "eval_loss": float(self.last_eval.loss) if self.last_eval else 0.0,
            "eval_tokens": int(self.last_eval.tokens) if self.last_eval else 0,
        }
        args = {"step": action.step, "index": action.index, "position": action.position,
                "participants": action.results.participants(), "results_root": action.results.root,
                "weights_digest": action.weights_digest, "metadata": metadata}  # fmt: skip
        c.events.emit(
            "witness_sent",
            step=action.step,
            position=action.position,
            attested=len(action.results.entries),
        )
        self._tx(action, lambda: c.chain.witness(c.wallet, c.run_address, args))

    async def _read_records(self, action: ReadRecords) -> None:
        run = self.c.latest
        assert run is not None
        # by step, against the newest Run: a round may have started since the machine asked, and the
        # records must be those of the round the report is about, not of the one now before the current
        back = round_step(run) - action.step
        try:
            records = await self.c.chain.round_records(run, back) if back >= 0 else ()
        except CohortError as e:
            self.c.events.emit("rpc_error", what="round_records", error=str(e)[:300])
            return
        self.c.post(RecordsRead(action.step, records))

    def _health_check(self, action: HealthCheck) -> None:
        c = self.c
        for start in range(0, len(action.indices), 32):
            chunk = list(action.indices[start : start + 32])
            c.events.emit("health_check", step=action.step, dropped=chunk)
            self._tx(
                action,
                lambda chunk=chunk: c.chain.health_check(
                    c.wallet, c.run_address, action.step, chunk
                ),
            )

    def _report_equivocation(self, action: ReportEquivocation) -> None:
        from cohort.sdk.client import SignedResult

        c = self.c
        run = c.latest
        assert run is not None
        node = run.clients[action.index].p2p_identity

        def signed(r: Any) -> SignedResult:
            return SignedResult(run.epoch_number, r.step, r.batch, r.commitment, r.signature)

        self._tx(action,
                 lambda: c.chain.report_equivocation(c.wallet, c.run_address, action.index, node,
                                                     signed(action.first), signed(action.second)))  # fmt: skip

    # -- verification ------------------------------------------------------------------------------
    async def _check(self, action: Check) -> None:
        """Fetch the trainer's two committed states from it and replay its step on the model worker, as a
        background job (our own jobs go first; worker.py). The weights the replay starts from are held while
        the check runs: over a slow link its fetch outlasts the steps the replica keeps them for."""
        trainer = await self.c.trainer_ready
        self.c.events.emit(
            "check_started", step=action.step, trainer=action.trainer, dispute=action.dispute
        )
        with trainer.holding(action.step):
            await self._run_check(action, trainer)

    async def _run_check(self, action: Check, trainer: Replica) -> None:
        c = self.c

        def done(passed: bool, reason: str, failure: str = "") -> None:
            c.post(
                Checked(
                    action.epoch,
                    action.step,
                    action.trainer,
                    passed,
                    reason,
                    failure,
                    action.dispute,
                )
            )

        published, previous = c.node.blob(action.commitment), c.node.blob(action.previous)
        # a dispute's committee asks for the states even once it cannot replay the step: whether the trainer
        # delivers them is what a non-delivery dispute decides (the replay then finds no weights: no verdict)
        replayable = action.dispute or trainer.can_verify(action.step)
        if published is None or previous is None or not replayable:
            return done(False, "we no longer hold what the check replays from")
        after, before = trainer.check(published).state, trainer.check(previous).state
        if not any(after) or not any(before):
            return done(False, "its results commit no optimizer state", "StateNotDelivered")
        if action.trainer not in self.addresses:
            return done(
                False, "we have no address for the trainer"
            )  # our gap, not evidence against it
        holder = [self.addresses[action.trainer]]
        seed = sample_seed(action.seed, action.trainer, action.step)
        # an ordinary check's fetches take the fetcher's background slots (behind rounds' results); a
        # dispute's do not queue behind them: it decides, and the trainer holds its states a few steps only
        bulk = not action.dispute
        began = time.perf_counter()
        try:
            async with asyncio.timeout(MANIFEST_DEADLINE):
                manifests = [await c.node.fetch_blob(h, holder, max_size=trainer.state_manifest_limit, background=bulk)
                             for h in (before, after)]  # fmt: skip
        except (BlobFetchError, OSError, TimeoutError) as e:
            return done(
                False,
                f"its state manifests could not be had: {e}"[:200],
                self._undelivered(action, e),
            )
        try:
            wanted = trainer.check_parts(seed, *manifests)
            sizes = {r.hash: r.size for m in manifests for r in Manifest.decode(m).chunk_refs()}
        except (StateError, ValueError) as e:
            return done(False, f"refused: {e}"[:200], "StateMismatch")
        folder = (
            c.shelf.root / "replica" / "checks"
        )  # beside what the replica keeps for checks; cleared with it
        folder.mkdir(parents=True, exist_ok=True)
        parts = PartsOnDisk.unique(folder, f"check-{action.step}-{action.trainer}")
        try:
            try:
                await self._fetch_parts(wanted, sizes, holder, parts, background=bulk, check=action)
            except (BlobFetchError, OSError, TimeoutError) as e:
                return done(
                    False,
                    f"its committed parts could not be had: {e}"[:200],
                    self._undelivered(action, e),
                )
            c.events.emit("check_fetched", step=action.step, trainer=action.trainer, parts=len(parts),
                          bytes=parts.size + sum(len(m) for m in manifests),
                          seconds=round(time.perf_counter() - began, 3))  # fmt: skip
            # in the background: our own train and apply never wait behind more than one replay (worker.py);
            # a dispute's replay goes before ordinary checks' (it decides, and its weights are kept a few steps)
            replay = Timed(trainer.verify_step)
            verdict = await c.worker.run_background(replay, action.step, published, previous, seed, manifests[0],
                                                    parts, manifests[1], parts, ahead=action.dispute)  # fmt: skip
        finally:
            parts.close()
        if verdict is None:
            return done(False, "we no longer hold the step's weights")
        c.events.emit("check_metrics", step=action.step, trainer=action.trainer, waited=round(replay.waited, 4),
                      worker_seconds=round(replay.seconds, 4),
                      **{k: round(v, 6) for k, v in verdict.metrics.items()})  # fmt: skip
        if verdict.passed:
            return done(True, verdict.reason)
        done(
            False,
            verdict.reason,
            "StateMismatch" if verdict.reason.startswith("refused") else "PayloadMismatch",
        )

    def _undelivered(self, action: Check, error: Exception) -> str:
        """What a fetch of a trainer's committed states that failed says: StateNotDelivered, or nothing when
        the trainer answered that it no longer holds them and the run has gone past the step by which it may
        have collected them (`STATE_HELD_FOR` steps): then we were late, it was not."""
        run = self.c.latest
        collected = run is not None and run.progress.step >= action.step + STATE_HELD_FOR
        if isinstance(error, BlobFetchError) and error.not_held and collected:
            return ""
        return "StateNotDelivered"

    async def _fetch_parts(
        self,
        wanted: list[bytes],
        sizes: dict[bytes, int],
        holder: list[PeerAddress],
        parts: PartsOnDisk,
        *,
        background: bool = True,
        check: Check | None = None,
    ) -> None:
        """Fetch the parts a check reads into `parts`, `CHECK_IN_FLIGHT` bytes' worth at a time (at least
        `CHECK_PARALLEL` parts), each tried `PART_TRIES` times, within a deadline that follows the bytes asked
        (TimeoutError past it; BlobFetchError when a part fails every try). A large part's size is known from
        its manifest, so it comes striped over the fetcher's lanes: over a lossy long link one connection's
        loss recovery, not the link, bounds a fetch; a small one comes whole (stripes of it would cost more
        requests than they save). Each retry is a `check_retry` event (of `check`)."""
        node = self.c.node
        rate = check_rate(self.c.latest)
        queue = list(reversed(wanted))
        largest = max((min(sizes.get(h, PART_SIZE), PART_SIZE) for h in wanted), default=PART_SIZE)
        parallel = max(CHECK_PARALLEL, CHECK_IN_FLIGHT // max(largest, 1))

        async def worker() -> None:
            while queue:
                h = queue.pop()
                for attempt in range(PART_TRIES):
                    try:
                        size = sizes.get(h)  # a size past the cap is the fetch's to refuse
                        striped = size is not None and CHECK_STRIPE_MIN <= size <= PART_SIZE
                        data = await node.fetch_blob(h, holder, max_size=PART_SIZE, background=background,
                                                     expected_size=size if striped else None,
                                                     min_rate=rate)  # fmt: skip
                        parts.add(h, data)
                        break
                    except BlobFetchError as e:
                        if attempt == PART_TRIES - 1:
                            raise
                        if check is not None:
                            self.c.events.emit("check_retry", step=check.step, trainer=check.trainer,
                                               part=h.hex()[:16], attempt=attempt + 1, error=str(e)[:200])  # fmt: skip
                        await asyncio.sleep(PART_RETRY_PAUSE)

        try:
            asked = sum(min(sizes.get(h, PART_SIZE), PART_SIZE) for h in wanted)
            async with asyncio.timeout(CHECK_SLACK + asked / rate):
                async with asyncio.TaskGroup() as group:
                    for _ in range(parallel):
                        group.create_task(worker())
        except (
            ExceptionGroup
        ) as failed:  # a worker's failure, as the caller expects it (not a group)
            raise failed.exceptions[0] from None

    def _report_check(self, action: ReportCheck) -> None:
        c = self.c
        self._tx(action,
                 lambda: c.chain.report_check(c.wallet, c.run_address, action.step, action.trainer, action.failure))  # fmt: skip

    def _vote_weights(self, action: VoteWeights) -> None:
        c = self.c
        self._tx(action,
                 lambda: c.chain.vote_weights(c.wallet, c.run_address, action.index, action.step, action.manifest))  # fmt: skip
