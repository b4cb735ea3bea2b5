"""A member that spans processes: N ranks on torch.distributed (FSDP2's `fully_shard`; gloo on CPU, NCCL for
a GPU's tensors) that speak as one member.

`cohort train --nproc-per-node N` (runtime/launch.py) starts the ranks on this machine, as torchrun would
(torchrun itself works too: a `cohort train` that finds WORLD_SIZE > 1 in its environment is one rank). Rank
0 runs the client (chain, peers, the model worker) with a `ShardedReplica`; every other rank runs
`serve_rank` and nothing else (no wallet, no peers, no chain), which carries out what rank 0 asks in the same
order, so every collective is entered by all ranks together. Rank 0 broadcasts an op when its model worker
runs it (inside the job), so the ranks follow the order the worker picks, a check's replay moved behind our
own jobs (worker.py) included. Rank 0 starts the conversation with the run's
spec and seed (only rank 0 reads the run), pings while it has nothing to ask (so a waiting rank never runs
into the process group's timeout, which is what ends a rank whose peers are gone), and says close when the
client is done. An op that fails on rank 0 leaves the ranks out of step: the member is then lost, and rank
0's client leaves the run.

Each rank holds its dim-0 rows of every parameter (FSDP2 gathers them for the forward and reduce-scatters the
gradients) and runs DisTrO on exactly those rows (distro/shards.py): lookahead, generate and apply never
gather the model. Rank 0 puts the ranks' tiles together into the member's payload; an apply hands every rank
the tiles of its rows, and since the apply is exact arithmetic a sharded member's weights are, bit for bit, a
one-process replica's (tests/client/test_sharded_replica.py). No rank ever holds the whole weights: a digest
is hashed on rank 0 as the ranks send their rows of each parameter a piece at a time, a checkpoint is written
by rows (checkpoint/rows.py: rank 0 lays out the files a one-process replica writes, byte for byte, since
members vote its hash; every rank writes its rows into them in place) and read back the same way.

A step's batch is split between the ranks (data parallel inside the member: `torch.tensor_split` order), each
rank's loss weighted by its share so the reduced gradient is the whole batch's mean. Every rank runs the same
number of forward/backward passes (a rank with fewer sequences runs a zero-weighted one), as FSDP's
collectives need. The ranks share one machine's file system (a checkpoint is loaded from rank 0's path).

In a run that verifies results the member commits its optimizer state after every step as a one-process
replica of the same layout commits its own (verify/state.py: the same `state.bin` and `signs.bin`, parts and
manifest, the manifest's hash in the payload's header), so any one-process verifier checks its results like
anyone's. Rank 0 writes it to its own disk (`scratch`, the old steps pruned as LocalReplica prunes them) and
never holds the member's whole momentum: the ranks stream it to rank 0 one piece at a time, in the state's
order (per bucket, per parameter, each rank's rows in rank order: a rank's dim-0 rows of a parameter are a
contiguous run of its flattened momentum), while rank 0 hashes and writes; the last transmission is the ranks'
`sent` tiles put together in tile order, as the payload's tiles are.

It checks other trainers' results on its shards too (`verify_step`): every rank keeps its rows of the
weights at each step's start on disk (as a one-process replica keeps its whole weights), rank 0 reads the
trainer's committed parts and streams each rank the momentum a replay starts from (the sign plane, the true
values on the sampled bands: `verify/sample.restored_momentum`) and its tiles of the last transmission, every
rank replays the step on its rows (its own weights and state wait on its disk meanwhile), and rank 0 puts
the replay's payload and sampled bands together and judges them as a one-process verifier would
(`verify/check.judge_replay`).

Not yet: stopping a step midway (an abort is honoured between steps).
"""

from __future__ import annotations

import hashlib
import math
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from cohort.sdk.presets import TrainingSpec

from ..checkpoint.layout import CheckpointInfo, verify
from ..checkpoint.rows import Placement, find_entries, lay_out, placements, read_rows, write_rows
from ..checkpoint.save import checkpoint_config, write_atomically
from ..checkpoint.writer import CheckpointWriter
from ..data import BatchId
from ..distro import DistroOptimizer, DistroResult, SparseTiles, WireCodec, plan_layout
from ..distro.shards import ShardPlan, assemble, local_results, local_tiles, plan_shard
from ..model import EvalResult, build_model, config_for, evaluate, lm_loss
from ..model.build import empty_model, initial_values
from ..model.digest import bit_sum, checksum_of
from ..verify import Verdict
from ..verify.check import judge_replay, open_check, supplied_states
from ..verify.sample import (
    CommittedParts,
    Sample,
    SampledState,
    manifest_limit,
    parts_to_fetch,
    restored_momentum,
    restored_sent,
    sample_bands,
    state_manifest,
)
from ..verify.snapshots import WeightSnapshots
from ..verify.state import (
    STREAM_VALUES,
    CommittedState,
    StateError,
    read_state_into,
    write_committed,
    write_state,
)
from .replica import Aborted, PayloadHeader, StepOutput
from .trainer import (
    KEPT_SNAPSHOTS,
    ColdStart,
    CommittedStates,
    distro_config,
    lr_schedule,
    open_dataset,
)

T = TypeVar("T")


@dataclass(frozen=True)
class _Replayed:
    """What a replay on the ranks gives rank 0: the payload and the sampled bands of the state after the
    step, its seconds, or the error that stopped it before it began."""

    payload: bytes | None
    state: SampledState | None
    seconds: float
    error: Exception | None


# seconds rank 0 lets pass without an op before it pings the others: far below any process group timeout
# (launch.RANK_TIMEOUT), so only a rank whose peers are gone waits that long
PING_EVERY = 10.0


def _shard_model(model: torch.nn.Module) -> None:
    """FSDP2 over each decoder layer, then the whole model (embeddings, final norm, head)."""
    from torch.distributed.fsdp import fully_shard

    for layer in getattr(getattr(model, "model", model), "layers", []):
        fully_shard(layer)
    fully_shard(model)


class _Rank:
    """What one rank holds and does; rank 0's lives inside the ShardedReplica."""

    def __init__(self, spec: TrainingSpec, seed: int, device: str, micro_batch_size: int | None,
                 scratch: Path, activation_checkpointing: bool = False) -> None:  # fmt: skip
        """`scratch`: the member's directory (on the ranks' shared disk); this rank keeps its rows of the
        weights a check replays from in a folder of its own there. `activation_checkpointing`: as
        LocalReplica's (each layer's input kept, the rest recomputed in the backward; every rank alike)."""
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.spec, self.micro_batch_size = spec, micro_batch_size
        self.device = torch.device(device)
        self.model_config = config_for(spec.architecture, spec.hf_config, vocab_size=spec.vocab_size,
                                       max_seq_len=spec.max_seq_len)  # fmt: skip
        model = empty_model(
            self.model_config
        )  # parameters on the meta device: no rank builds the whole model
        model.train()
        self.names = [name for name, _ in model.named_parameters()]
        self.shapes = [tuple(p.shape) for p in model.parameters()]  # whole, before sharding
        config = distro_config(spec.distro)
        whole = plan_layout(((n, p.shape) for n, p in model.named_parameters()), config)
        self.plans: list[ShardPlan] = [plan_shard(whole, r, self.world) for r in range(self.world)]
        self.plan = self.plans[self.rank]
        if (
            activation_checkpointing
        ):  # before sharding: FSDP's hooks then gather a layer again for its recompute
            model.config.use_cache = False
            model.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False}
            )
        _shard_model(model)
        self._materialize(model, seed)
        self.model = model
        self.sharded = list(model.parameters())
        # this rank's rows, as parameters sharing FSDP's shard storage: what DisTrO updates in place
        self.local = [torch.nn.Parameter(p.detach().to_local()) for p in self.sharded]
        shapes = tuple(tuple(p.shape) for p in self.local)
        if shapes != self.plan.local.shapes:
            raise RuntimeError(f"FSDP's shards {shapes[:3]}… are not the rows DisTrO planned")
        self.cold_start = ColdStart(lr_schedule(spec.lr), spec.cold_start_warmup_steps)
        self.optimizer = DistroOptimizer(zip(self.names, self.local, strict=True), config, self.cold_start,
                                         layout=self.plan.local, all_reduce_sum=self._sum)  # fmt: skip
        self.codec = WireCodec.for_config(whole, config)
        self.data = open_dataset(spec)
        self.validation = open_dataset(spec, split="validation")
        self.commit = (
            False  # the run verifies: every step's optimizer state is committed (on rank 0's disk)
        )
        self.folder = scratch / f"rank-{self.rank}"
        shutil.rmtree(self.folder, ignore_errors=True)  # a previous run's: nobody replays from them
        self.snapshots = WeightSnapshots(
            self.folder / "snapshots", KEPT_SNAPSHOTS
        )  # our rows at a step's start
        self._stash = WeightSnapshots(
            self.folder / "stash", 1
        )  # our own rows while a check borrows them

    def _materialize(self, model: torch.nn.Module, seed: int) -> None:
        """Give the sharded model's parameters their rows of a one-process replica's start (model/build.py:
        each unit drawn whole on the CPU, this rank's rows kept; memory: one decoder layer) and its buffers
        back (made on the CPU with the model, emptied by `to_empty`)."""
        buffers = {name: b.clone() for name, b in model.named_buffers()}
        model.to_empty(device=self.device)
        params = list(model.parameters())
        unsharded = empty_model(
            self.model_config
        )  # the same modules, unwrapped (FSDP's cannot be copied)
        index = {id(p): i for i, p in enumerate(unsharded.parameters())}
        with torch.no_grad():
            for name, b in model.named_buffers():
                b.copy_(buffers[name])
            for p, values in initial_values(unsharded, seed):
                i = index[id(p)]
                start, end = self.plan.dim0[i]
                params[i].to_local().copy_(values[start:end])

    @staticmethod
    def _sum(t: torch.Tensor) -> torch.Tensor:
        dist.all_reduce(t)
        return t

    def start_epoch(
        self, start_step: int, cold: bool, verified: bool, held: tuple[int, ...]
    ) -> None:
        """`held`: the steps whose snapshots rank 0's checks hold (every rank keeps the same files)."""
        self.cold_start.start, self.cold_start.active = start_step, cold
        self.commit = verified
        self.snapshots.clear(held)

    def train(self, step: int, start: int, end: int, held: tuple[int, ...]) -> tuple[DistroResult | None,
                                                                                      tuple[SparseTiles, ...] | None,
                                                                                      float, int]:  # fmt: skip
        """(the member's result on rank 0, with its last transmission when it commits its state (both the
        ranks' tiles put together in the model's tile order), the batch's mean loss, tokens) for the batch
        [start, end). A committing member's momentum follows in the next op (`send_momentum`). `held` as in
        `start_epoch`."""
        if (
            self.commit
        ):  # our rows of every replica's weights at this step's start: what a check replays from
            self.snapshots.take(step, self.local, held)
        return self._step(step, start, end, self.commit)

    def _step(self, step: int, start: int, end: int, keep_sent: bool) -> tuple[DistroResult | None,
                                                                               tuple[SparseTiles, ...] | None,
                                                                               float, int]:  # fmt: skip
        """One step on the batch [start, end), as `train` describes; the last transmission with it when
        `keep_sent`."""
        sequences = self.data.sequences(BatchId(start, end))
        total = len(sequences)
        mine = torch.tensor_split(sequences, self.world)[self.rank].to(self.device)
        most = -(-total // self.world)  # the most sequences any rank gets
        size = self.micro_batch_size or max(1, most)
        passes = max(1, -(-most // size))  # the most passes any rank runs
        self.optimizer.lookahead(step)
        loss_sum = torch.zeros((), dtype=torch.float64)
        try:
            for k in range(passes):
                chunk = mine[k * size : (k + 1) * size]
                real = len(chunk)
                if real == 0:  # keep the collectives in step with the other ranks
                    chunk = sequences[:1].to(self.device)
                loss = lm_loss(self.model, chunk)
                (
                    loss * (real / total * self.world)
                ).backward()  # FSDP averages the ranks' gradients
                loss_sum += float(loss.detach()) * real
            for view, p in zip(self.local, self.sharded, strict=True):
                view.grad = None if p.grad is None else p.grad.detach().to_local()
            result = self.optimizer.generate(step, BatchId(start, end))
        except BaseException:
            self.optimizer.abandon_step()
            raise
        finally:
            self.model.zero_grad(set_to_none=True)
            for view in self.local:
                view.grad = None
        dist.all_reduce(loss_sum)
        loss, tokens = float(loss_sum) / total, sequences.numel()
        sent = None
        if (
            keep_sent
        ):  # what the error feedback removed: the state's last section (after generate, never None)
            sent = tuple(
                SparseTiles(i.cpu(), v.cpu()) for i, v in self.optimizer.state_dict()["sent"]
            )
        parts: list[Any] | None = [None] * self.world if self.rank == 0 else None
        dist.gather_object((_on_cpu(result), sent), parts, dst=0)
        if parts is None:
            return None, None, loss, tokens
        results = [r for r, _ in parts]
        whole = assemble(self.plans, results)
        if not keep_sent:
            return whole, None, loss, tokens
        sent_tiles = assemble(
            self.plans, [replace(r, tiles=s) for r, (_, s) in zip(results, parts, strict=True)]
        )
        return whole, sent_tiles.tiles, loss, tokens

    def momentum_pieces(self) -> Iterator[torch.Tensor]:
        """The member's momentum in the order of a one-process replica's state (per bucket, per member
        parameter, every rank's rows of it in rank order, flat), in pieces of at most STREAM_VALUES values. On
        rank 0 it yields each piece as it comes (its own rows where they lie, the others' received from the
        rank that holds them, one at a time); on another rank it yields nothing and sends its own pieces to
        rank 0 as rank 0 comes to them, so every rank must run through it together (`send_momentum`)."""
        for i, j, r, lo, hi, _ in self._state_order():
            if r == self.rank:
                piece = self.optimizer.momentum[i][j].reshape(-1)[lo:hi]
                if self.rank == 0:
                    yield piece
                else:
                    dist.send(piece.contiguous(), dst=0)
            elif self.rank == 0:
                piece = torch.empty(hi - lo, dtype=torch.float32, device=self.device)
                dist.recv(piece, src=r)
                yield piece

    def _state_order(self) -> Iterator[tuple[int, int, int, int, int, int]]:
        """The member's momentum in a state's order, in pieces of at most STREAM_VALUES values: (bucket,
        member, rank, [lo, hi) of that rank's flat rows of the member, where lo lies in the bucket's whole
        flat momentum)."""
        for i, bucket in enumerate(self.plan.model.buckets):
            per_row = math.prod(bucket.shape[1:])  # values in one dim-0 row
            for j, member in enumerate(bucket.members):
                for r, plan in enumerate(self.plans):
                    count = math.prod(
                        plan.local.buckets[i].shape
                    )  # rank r's rows of this parameter
                    first = j * math.prod(bucket.shape) + plan.dim0[member][0] * per_row
                    for lo in range(0, count, STREAM_VALUES):
                        yield i, j, r, lo, min(count, lo + STREAM_VALUES), first + lo

    def send_momentum(self) -> None:
        """A rank other than 0: send its momentum to rank 0, which writes the member's state meanwhile."""
        for _ in self.momentum_pieces():
            pass

    # -- checking another trainer's step on our rows ----------------------------------------------------------

    def replay(self, step: int, start: int, end: int, samples: tuple[Sample, ...],
               source: tuple[CommittedParts, SampledState] | None = None) -> _Replayed | None:  # fmt: skip
        """Replay a trainer's step on the batch [start, end) from the weights every replica held at its start
        (our rows, from disk) and the trainer's state before it, which rank 0 reads from `source` (the
        trainer's committed parts and their sampled bands; None on the other ranks). Our own weights and
        state wait on disk meanwhile and come back bit for bit. On rank 0: the replay's payload and sampled
        bands, or the error that stopped it (every rank stops together)."""
        own = write_state(self.optimizer, 0, self.folder / "stash" / "own-state", signs=False)
        self._stash.take(0, self.local)
        try:
            self.snapshots.load_into(step, self.local)
            error = self._restore(samples, source)
            if error is not None:
                return _Replayed(None, None, 0.0, error)
            started = time.perf_counter()
            result, sent, _, _ = self._step(step, start, end, keep_sent=True)
            rows = self._sampled_rows(samples)
            if result is None or rows is None:
                return None
            assert sent is not None
            replayed = SampledState(
                step,
                tuple(rows),
                tuple(
                    SparseTiles(
                        sent[s.bucket].indices[s.band.tiles], sent[s.bucket].values[s.band.tiles]
                    )
                    for s in samples
                ),
            )
            return _Replayed(
                self.codec.encode(result), replayed, time.perf_counter() - started, None
            )
        finally:
            self.optimizer.abandon_step()  # a replay stopped midway leaves no lookahead or gradients behind
            self._stash.load_into(0, self.local)
            read_state_into(self.optimizer, own.root)
            self._reshard()

    def _restore(
        self, samples: Sequence[Sample], source: tuple[CommittedParts, SampledState] | None
    ) -> Exception | None:
        """Put into our optimizer what a replay reads of the trainer's state before the step: rank 0 streams
        every rank its rows of the restored momentum in the state's order and scatters its tiles of the last
        transmission. A part rank 0 cannot read (not fetched, or a sign plane holding an invalid code) is
        sent as zeros and the error returned on every rank's behalf after the stream, so no rank is left
        waiting inside a collective."""
        layout = self.plan.model
        error: Exception | None = None

        def values(i: int, lo: int, hi: int) -> torch.Tensor:
            nonlocal error
            assert source is not None
            if error is None:
                try:
                    return restored_momentum(source[0], layout, source[1], samples, i, lo, hi).to(
                        self.device
                    )
                except (StateError, LookupError) as e:
                    error = e
            return torch.zeros(hi - lo, dtype=torch.float32, device=self.device)

        for i, j, r, lo, hi, whole in self._state_order():
            if r == self.rank:
                target = self.optimizer.momentum[i][j].view(-1)[lo:hi]
                if self.rank == 0:
                    target.copy_(values(i, whole, whole + hi - lo))
                else:
                    dist.recv(target, src=0)
            elif self.rank == 0:
                dist.send(values(i, whole, whole + hi - lo), dst=r)
        sent: list[Any] | None = None
        if self.rank == 0:
            assert source is not None
            whole_sent = restored_sent(layout, source[1], samples)
            if whole_sent is None:
                sent = [None] * self.world
            else:
                sent = [local_tiles(plan, whole_sent) for plan in self.plans]
        box: list[Any] = [(None, error)]
        dist.scatter_object_list(box, None if sent is None else [(t, error) for t in sent], src=0)
        mine, error = box[0]
        self.optimizer.load_state_dict({"layout": self.plan.local.digest, "momentum": list(self.optimizer.momentum),
                                        "sent": None if mine is None else [(t.indices.to(self.device),
                                                                            t.values.to(self.device)) for t in mine]})  # fmt: skip
        return error

    def _sampled_rows(self, samples: Sequence[Sample]) -> list[torch.Tensor] | None:
        """The replay's momentum on the sampled bands, put together on rank 0 from every rank's rows of them
        (None on the other ranks)."""
        mine = []
        for k, s in enumerate(samples):
            b = self.plan.model.buckets[s.bucket]
            first, last = self._member_rows(s.bucket)
            held = (
                self.optimizer.momentum[s.bucket].detach().reshape(len(b.members), -1, b.row_width)
            )
            for j, lo, hi, at in s.band.parts():
                a, z = max(lo, first), min(hi, last)
                if a < z:
                    mine.append((k, at + a - lo, held[j, a - first : z - first].cpu().clone()))
        gathered: list[Any] | None = [None] * self.world if self.rank == 0 else None
        dist.gather_object(mine, gathered, dst=0)
        if gathered is None:
            return None
        rows = [torch.empty(s.band.shape) for s in samples]
        covered = [0] * len(samples)
        for pieces in gathered:
            for k, at, piece in pieces:
                rows[k][at : at + len(piece)] = piece
                covered[k] += len(piece)
        if covered != [s.band.end - s.band.start for s in samples]:
            raise RuntimeError(
                "the ranks' rows do not cover the sampled bands"
            )  # a plan that is not FSDP's
        return rows

    def _member_rows(self, bucket: int) -> tuple[int, int]:
        """[first, last) of each member's rows (in the bucket's (rows, row_width) view) that this rank holds."""
        b = self.plan.model.buckets[bucket]
        start, end = self.plan.dim0[b.members[0]]
        values = math.prod(
            b.shape[1:]
        )  # values in one dim-0 row; plan_shard keeps our rows whole bucket rows
        return start * values // b.row_width, end * values // b.row_width

    def close(self) -> None:
        """Remove what this rank keeps on disk (its rows of recent weights)."""
        shutil.rmtree(self.folder, ignore_errors=True)

    def apply(self, step: int, payloads: Sequence[bytes]) -> None:
        decided = [self.codec.decode(p) for p in payloads]
        self.optimizer.apply(step, local_results(self.plan, decided))

    def digest(self) -> str | None:
        """On rank 0, the digest a one-process replica of these weights gives (`tensors_digest`): every
        parameter's rows hashed in order as the ranks send them, a piece at a time (no rank holds a whole
        tensor); None on the others."""
        h = hashlib.sha256() if self.rank == 0 else None
        for i, (name, shape) in enumerate(zip(self.names, self.shapes, strict=True)):
            mine = self.local[i].detach().reshape(-1)
            if h is not None:
                h.update(f"{name}|{mine.dtype}|{shape}|".encode())
            for r, plan in enumerate(self.plans):
                start, end = plan.dim0[i]
                count = (end - start) * math.prod(shape[1:])
                for lo in range(0, count, STREAM_VALUES):
                    hi = min(count, lo + STREAM_VALUES)
                    if r == self.rank:
                        piece = mine[lo:hi].cpu().contiguous()
                        if h is None:
                            dist.send(piece, dst=0)
                    elif h is not None:
                        piece = torch.empty(hi - lo, dtype=mine.dtype)
                        dist.recv(piece, src=r)
                    else:
                        continue
                    if h is not None:
                        h.update(memoryview(piece.view(torch.uint8).numpy()))
        return None if h is None else h.hexdigest()

    def checkpoint_rows(
        self, directory: Path, places: Sequence[Placement | None], buffers: Mapping[str, Placement]
    ) -> None:
        """Write this rank's rows of every parameter (`places`, per parameter: where its tensor lies in the
        checkpoint's files, laid out by rank 0) and, on rank 0, the persistent buffers (whole on every rank);
        returns once every rank has written."""
        writes = [(place, self.plan.dim0[i][0], p.detach()) for i, (place, p) in enumerate(zip(places, self.local, strict=True))
                  if place is not None]  # fmt: skip
        if self.rank == 0:
            held = dict(self.model.named_buffers())
            writes += [(place, 0, held[name].detach()) for name, place in buffers.items()]
        write_rows(directory, writes)
        dist.barrier()

    def checksum(self) -> int | None:
        sums = torch.tensor([bit_sum(p) for p in self.local], dtype=torch.int64)
        dist.all_reduce(sums)  # integer sums: the whole tensors' sums, in any order
        if self.rank != 0:
            return None
        shapes = self.plan.model.shapes
        return checksum_of(
            (name, p.dtype, shape, int(total))
            for name, p, shape, total in zip(
                self.names, self.local, shapes, sums.tolist(), strict=True
            )
        )

    def load(self, path: Path, saved_as: Sequence[str]) -> None:
        """This rank's rows of every parameter (saved under `saved_as`, per parameter) read from a checkpoint
        rank 0 verified, straight into place; fresh momentum (a cold start, as a one-process replica's)."""
        entries = find_entries(path, saved_as)
        read_rows(
            (*entries[name], self.plan.dim0[i][0], p.data)
            for i, (name, p) in enumerate(zip(saved_as, self.local, strict=True))
        )
        self.optimizer.reset_momentum()
        self._reshard()

    def evaluate(self, max_sequences: int) -> EvalResult:
        try:
            return evaluate(
                self.model, self.validation, max_sequences
            )  # every rank the same sequences
        finally:
            self._reshard()

    def _reshard(self) -> None:
        """Free every gathered parameter, so the next forward gathers the rows DisTrO holds. FSDP2 keeps the
        root's parameters (embeddings, final norm, head) gathered after a forward that no backward follows
        (an evaluation): the next step's forward would run on those stale copies, missing its own lookahead
        and every apply since (a payload and a state a replay of the step does not reproduce)."""
        from torch.distributed.fsdp import FSDPModule

        for module in self.model.modules():
            if isinstance(module, FSDPModule):
                module.reshard()


def _portable(spec: TrainingSpec) -> TrainingSpec:
    """The spec as pickle carries it (its preset's config is a read-only mapping, which pickle refuses)."""
    return replace(spec, hf_config=dict(spec.hf_config))


def _unportable(spec: TrainingSpec) -> TrainingSpec:
    return replace(spec, hf_config=MappingProxyType(dict(spec.hf_config)))


def _on_cpu(result: DistroResult) -> DistroResult:
    tiles = tuple(SparseTiles(t.indices.cpu(), t.values.cpu()) for t in result.tiles)
    return DistroResult(result.step, result.batch, tiles, result.state)


class Leader:
    """Rank 0's end of the ranks' conversation. Every op is broadcast to the other ranks and then run here,
    one at a time (the model worker, the pinger and close never interleave), so all ranks enter every
    collective together. While rank 0 has nothing to ask (connecting, waiting for members or an epoch) it
    pings, so the others' wait stays far below the process group's timeout.

    An op that fails here after the broadcast leaves the ranks out of step (the others go on into its
    collectives), as does a failed ping (a rank is gone): the member is `lost`, every later op fails at once,
    and `on_lost` is called (rank 0's client then leaves the run)."""

    def __init__(self, ping_every: float = PING_EVERY) -> None:
        if not dist.is_initialized() or dist.get_rank() != 0:
            raise RuntimeError("rank 0 of an initialised process group leads a member's ranks")
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._last = time.monotonic()
        self.lost: BaseException | None = None
        self.on_lost: Callable[[BaseException], None] | None = None
        self._pinger = threading.Thread(
            target=self._ping, args=(ping_every,), name="rank-pings", daemon=True
        )
        self._pinger.start()

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def run(self, op: str, args: tuple, here: Callable[[], T]) -> T:
        """Send `op(*args)` to the other ranks, then `here()` on this one; its result."""
        with self._lock:
            if self.lost is not None:
                raise RuntimeError(f"this member lost a rank: {self.lost}")
            if self._closed.is_set():
                raise RuntimeError("this member's ranks were let go")
            try:
                dist.broadcast_object_list([(op, args)], src=0)
                return here()
            except BaseException as e:
                self._lose(e)
                raise
            finally:
                self._last = time.monotonic()

    def _lose(self, error: BaseException) -> None:
        if self.lost is not None:
            return
        self.lost = error
        if self.on_lost is not None:
            try:
                self.on_lost(error)
            except Exception:  # a callback's failure must not hide the loss itself
                pass

    def _ping(self, every: float) -> None:
        while not self._closed.wait(min(every, 1.0)):
            if time.monotonic() - self._last < every:
                continue
            with self._lock:
                if self._closed.is_set() or self.lost is not None:
                    return
                if time.monotonic() - self._last < every:  # an op ran while we waited for the lock
                    continue
                try:
                    dist.broadcast_object_list([("ping", ())], src=0)
                except BaseException as e:
                    self._lose(e)
                    return
                self._last = time.monotonic()

    def close(self) -> None:
        """Let the other ranks go: they leave `serve_rank` after a barrier with this one, so afterwards every
        rank may tear its process group down. Once; nothing is sent to a lost member."""
        with self._lock:
            if self._closed.is_set():
                return
            self._closed.set()
            if self.lost is None:
                try:
                    dist.broadcast_object_list([("close", ())], src=0)
                    dist.barrier()  # every rank has heard it before any tears its process group down
                except Exception as e:
                    self._lose(e)
        self._pinger.join(timeout=5)


_leaders: dict[str, Leader] = {}  # this process's one Leader, like its one default process group
_leaders_lock = threading.Lock()


def leader() -> Leader:
    """Rank 0's Leader of this process's group, started on first use (again after a close)."""
    with _leaders_lock:
        current = _leaders.get("default")
        if current is None or current.closed:
            current = _leaders["default"] = Leader()
        return current


class ShardedReplica:
    """Rank 0's `Replica` (replica.py) of a member whose model is sharded over `world` ranks."""

    def __init__(self, spec: TrainingSpec, *, seed: int, device: str = "cpu",
                 micro_batch_size: int | None = None, scratch: Path | None = None,
                 activation_checkpointing: bool = False) -> None:  # fmt: skip
        """`scratch`: a directory of this member's own (on rank 0's disk) for the optimizer states it commits
        when the run verifies results; default: a temporary one, removed with it. `activation_checkpointing`:
        on every rank (`cohort train --lean-memory`)."""
        if not dist.is_initialized() or dist.get_rank() != 0:
            raise RuntimeError("a ShardedReplica lives on rank 0 of an initialised process group")
        self.spec = spec
        self._scratch_dir = (
            tempfile.TemporaryDirectory(prefix="cohort-sharded-") if scratch is None else None
        )
        self.scratch = Path(self._scratch_dir.name) if self._scratch_dir is not None else scratch
        shutil.rmtree(
            self.scratch / "states", ignore_errors=True
        )  # a previous run of this client's: nobody serves them
        self._states = CommittedStates(self.scratch / "states")
        self._leader = leader()
        # the other ranks learn the run here (only rank 0 reads it), then every rank builds its rows
        args = (seed, micro_batch_size, self.scratch, activation_checkpointing)
        self._rank = self._leader.run(
            "start", (_portable(spec), *args), lambda: _Rank(spec, args[0], device, *args[1:])
        )
        self.device = self._rank.device
        self._view = build_model(self._rank.model_config, device="meta")

    def _everyone(self, op: str, *args: Any) -> Any:
        """Run `op` on every rank, rank 0's result back (the others run it as `serve_rank` hears it)."""
        return self._leader.run(op, args, lambda: getattr(self._rank, op)(*args))

    @property
    def model(self) -> torch.nn.Module:
        """The model's own class and config on the meta device (no memory): what parameters are counted on
        and a checkpoint's files and config are laid out from (FSDP2 renames the sharded module's class)."""
        return self._view

    def _checkpoint_tensors(
        self,
    ) -> tuple[dict[str, torch.Tensor], list[str], dict[str, torch.Tensor]]:
        """What a checkpoint of these weights holds, as a one-process replica's (save.snapshot: its state
        dict's tensors in order, tied weights once under their first name), on the meta device; the name each
        parameter is saved under; and the persistent buffers among them."""
        view = self._view
        tensors: dict[str, torch.Tensor] = {}
        named: dict[int, str] = {}
        for name, t in type(view).state_dict(view, keep_vars=True).items():
            if id(t) not in named:
                named[id(t)] = name
                tensors[name] = t.detach()
        saved_as = [named[id(p)] for p in view.parameters()]
        buffers = {name: t for name, t in tensors.items() if name not in set(saved_as)}
        return tensors, saved_as, buffers

    def checkpoint(
        self, writer: CheckpointWriter, *, run_id: str, step: int, epoch: int
    ) -> Future[CheckpointInfo]:
        """Write the weights as the run's checkpoint into `writer`'s folder, blocking (the ranks' weights are
        not copied anywhere, so training waits): rank 0 lays the files out, every rank writes its rows into
        them, rank 0 finishes. The files are those a one-process replica writes (members vote its hash)."""
        tensors, saved_as, buffers = self._checkpoint_tensors()
        places = placements(tensors, writer.max_shard_bytes)
        done: Future[CheckpointInfo] = Future()

        def write(temp: Path) -> str:
            lay_out(temp, tensors, writer.max_shard_bytes)
            self._everyone("checkpoint_rows", temp, [places[name] for name in saved_as],
                           {name: places[name] for name in buffers})  # fmt: skip
            checkpoint_config(self._view).save_pretrained(temp)
            return self._everyone("digest")

        try:
            done.set_result(
                write_atomically(
                    writer.root, run_id, step, epoch, write, keep_last=writer.keep_last
                )
            )
        except BaseException as e:
            done.set_exception(e)
        return done

    @property
    def codec(self) -> WireCodec:
        return self._rank.codec

    @property
    def payload_size(self) -> int:
        return self.codec.size

    @property
    def state_manifest_limit(self) -> int:
        """The largest manifest of a state a trainer of this run commits (ours included)."""
        return manifest_limit(self._rank.plan.model)

    def check_parts(self, seed: bytes, before: bytes, after: bytes) -> list[bytes]:
        """What a check drawn with `seed` reads of a trainer's two states (never asked yet: can_verify is false)."""
        layout = self._rank.plan.model
        return parts_to_fetch(layout, sample_bands(layout, seed), state_manifest(before, layout),
                              state_manifest(after, layout))  # fmt: skip

    @property
    def commit_state(self) -> bool:
        """Whether every step commits the member's optimizer state (the epoch's run verifies results)."""
        return self._rank.commit

    def start_epoch(self, start_step: int, cold: bool, verified: bool = False) -> None:
        """The epoch's first step, whether it is a cold start, and whether the run verifies results (then every
        step commits the member's optimizer state)."""
        self._everyone("start_epoch", start_step, cold, verified, self._rank.snapshots.held())

    def train(
        self, step: int, start: int, end: int, abort: threading.Event | None = None
    ) -> StepOutput:
        if abort is not None and abort.is_set():  # between steps only: the ranks run a step as one
            raise Aborted(f"training of step {step} stopped")
        started = time.perf_counter()
        result, sent, loss, tokens = self._everyone(
            "train", step, start, end, self._rank.snapshots.held()
        )
        assert result is not None
        state = None
        if self.commit_state:
            assert sent is not None
            state = self._commit(step, sent)
            result = replace(result, state=state.commitment)
        return StepOutput(
            self.codec.encode(result), loss, tokens, time.perf_counter() - started, state
        )

    def _commit(self, step: int, sent: tuple[SparseTiles, ...]) -> CommittedState:
        """The member's optimizer state after `step`, kept as a one-process replica keeps its own
        (CommittedStates), the momentum streamed from the ranks one piece at a time."""
        layout = self._rank.plan.model
        return self._states.commit(
            step,
            lambda partial: self._leader.run(
                "send_momentum",
                (),
                lambda: write_committed(partial, layout, step, self._rank.momentum_pieces(), sent),
            ),
        )

    def check(self, payload: bytes) -> PayloadHeader:
        result = self.codec.decode(payload).result
        return PayloadHeader(result.step, (result.batch.start, result.batch.end), result.state)

    def apply(self, step: int, payloads: Sequence[bytes]) -> None:
        self._everyone("apply", step, list(payloads))

    def digest(self) -> str:
        return self._everyone("digest")

    def checksum(self) -> int:
        return self._everyone("checksum")

    def load(self, path: Path, manifest_hash: bytes) -> None:
        """A verified checkpoint's weights (checked here, on rank 0, once), every rank reading its rows."""
        verify(path, manifest_hash)
        self._everyone("load", path, self._checkpoint_tensors()[1])

    def evaluate(self, max_sequences: int) -> EvalResult:
        return self._everyone("evaluate", max_sequences)

    def can_verify(self, step: int) -> bool:
        """Whether the ranks hold the weights a check of `step` replays from (we trained that step ourselves)."""
        return step in self._rank.snapshots

    def holding(self, step: int) -> AbstractContextManager[bool]:
        """Keep the ranks' rows of `step`'s start while a check of it runs: held on rank 0, and every op that
        may drop snapshots (train, start_epoch) tells each rank which steps are held."""
        return self._rank.snapshots.holding(step)

    def verify_step(self, step: int, published: bytes, previous: bytes, seed: bytes, state_before: bytes,
                    before_parts: Mapping[bytes, bytes], state_after: bytes,
                    after_parts: Mapping[bytes, bytes]) -> Verdict | None:  # fmt: skip
        """LocalReplica.verify_step's check, replayed on the ranks' rows (`_Rank.replay`)."""
        if step not in self._rank.snapshots:
            return None
        header, before = self.check(published), self.check(previous)
        layout = self._rank.plan.model
        supplied = supplied_states(layout, state_before, before_parts, state_after, after_parts)
        if isinstance(supplied, Verdict):
            return supplied
        opened = open_check(self.codec, step=step, published=published, state_before=supplied[0],
                            state_before_commitment=before.state, state_after=supplied[1],
                            state_after_commitment=header.state, seed=seed)  # fmt: skip
        if isinstance(opened, Verdict):
            return opened
        start, end = header.batch
        source = (supplied[0], opened.before)
        out: _Replayed = self._leader.run("replay", (step, start, end, opened.samples),
                                          lambda: self._rank.replay(step, start, end, opened.samples, source))  # fmt: skip
        if isinstance(out.error, StateError):
            return Verdict(False, f"refused: {out.error}")
        if out.error is not None:
            raise out.error  # our own gap (a part we did not fetch): no verdict
        assert out.payload is not None and out.state is not None
        return judge_replay(self.codec, self._rank.optimizer.config, opened, step=step, batch=BatchId(start, end),
                            published=published, replayed_payload=out.payload, replayed=out.state,
                            seconds=out.seconds)  # fmt: skip

    def close(self) -> None:
        """Let the other ranks go (Leader.close: afterwards every rank may tear its process group down), and
        remove what rank 0 keeps on disk."""
        self._leader.close()
        self._rank.close()


def serve_rank(spec: TrainingSpec | None = None, *, seed: int | None = None, device: str = "cpu",
               micro_batch_size: int | None = None) -> None:  # fmt: skip
    """A rank other than 0: hold its rows and do what rank 0 asks until it says close. Rank 0's
    ShardedReplica sends the run (spec, seed, micro-batch size) first; a caller that knows them too passes
    them to be checked (`cohort train` passes none: only rank 0 reads the run). `device` is this rank's."""
    rank: _Rank | None = None
    while True:
        box: list[Any] = [None]
        dist.broadcast_object_list(box, src=0)
        op, args = box[0]
        if op == "ping":
            continue
        if op == "close":
            if rank is not None:
                rank.close()
            dist.barrier()
            return
        if op == "start":
            sent_spec, sent_seed, sent_micro, scratch, checkpointing = (
                _unportable(args[0]),
                *args[1:],
            )
            mine = (spec, seed, micro_batch_size)
            if any(
                m is not None and m != s
                for m, s in zip(mine, (sent_spec, sent_seed, sent_micro), strict=True)
            ):
                raise RuntimeError(
                    "rank 0 trains another run, seed or micro-batch size than this rank was given"
                )
            rank = _Rank(sent_spec, sent_seed, device, sent_micro, scratch, checkpointing)
            continue
        if rank is None:
            raise RuntimeError(f"rank 0 asked for {op!r} before it started the member")
        getattr(rank, op)(*args)
