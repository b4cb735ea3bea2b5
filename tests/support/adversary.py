"""The project's own client with one behaviour swapped: the adversary of the integrity tests and benchmarks.

    COHORT_ADVERSARY=MODE python -m support.adversary train --run ...   (tests/ on PYTHONPATH)

Payload modes (what the trainer sends instead of its honest result; header, signature and size stay valid):
    flip        the honest payload with every value negated
    random      random well-formed picks and values, no compute
    lazy        the minimal payload (the first k positions of every tile, all +1), no compute
    copy        another trainer's latest applied result, re-headed as our own, no compute
    poison      trains on its own text (POISON_TOKENS repeated) instead of its batch
    partial     flips one step in four (an adversary that cheats only some of the time)
Behaviour modes:
    censor      as a witness, leaves the lowest-indexed other trainer out of every results list it signs
    equivocate  signs and announces a second, different result for every step it trains

Nothing here ships with cohort: it patches the installed client in this process only, then runs the CLI."""

from __future__ import annotations

import os
import sys

import torch

MODES = ("flip", "random", "lazy", "copy", "poison", "partial", "censor", "equivocate")
POISON_SEED = 1234  # the adversary's "own text": a fixed token string it implants


def poison_tokens(vocab_size: int, length: int) -> torch.Tensor:
    """The string the poisoner trains on (benchmarks measure the run's loss on it)."""
    generator = torch.Generator().manual_seed(POISON_SEED)
    return torch.randint(0, vocab_size, (length,), generator=generator)


def _negated(codec, payload: bytes) -> bytes:
    from cohort.client.distro import DistroResult
    from cohort.client.distro.compress import SparseTiles

    result = codec.decode(payload).result
    tiles = tuple(SparseTiles(t.indices, -t.values) for t in result.tiles)
    return codec.encode(
        DistroResult(result.step, result.batch, tiles, result.state)
    )  # its honest state


def _made_up(codec, step: int, batch, minimal: bool) -> bytes:
    from cohort.client.distro import DistroResult
    from cohort.client.distro.compress import SparseTiles

    tiles = []
    for b in codec.layout.buckets:
        if minimal:
            indices = torch.arange(b.topk).expand(b.num_tiles, b.topk).clone()
            values = torch.ones(b.num_tiles, b.topk)
        else:
            indices = (
                torch.rand(b.num_tiles, b.totalk).argsort(dim=1)[:, : b.topk].sort(dim=1).values
            )
            values = torch.randn(b.num_tiles, b.topk)
        tiles.append(SparseTiles(indices, values))
    return codec.encode(DistroResult(step, batch, tuple(tiles)))


def _rehead(codec, payload: bytes, step: int, batch) -> bytes:
    from cohort.client.distro import DistroResult

    result = codec.decode(payload).result
    return codec.encode(
        DistroResult(step, batch, result.tiles, result.state)
    )  # the peer's state commitment too


def install(mode: str) -> None:
    """Swap one behaviour of this process's client."""
    if mode not in MODES:
        raise SystemExit(f"COHORT_ADVERSARY must be one of {', '.join(MODES)}, got {mode!r}")
    from cohort.client.data import BatchId
    from cohort.client.runtime import trainer as trainer_module
    from cohort.client.runtime.replica import StepOutput
    from cohort.client.runtime.trainer import LocalReplica

    honest_train, honest_apply = LocalReplica.train, LocalReplica.apply

    def train(self, step, start, end, abort=None):
        batch = BatchId(start, end)
        tokens = (end - start) * self.spec.max_seq_len
        if mode in ("random", "lazy"):
            return StepOutput(
                _made_up(self.codec, step, batch, minimal=mode == "lazy"), 0.0, tokens, 1e-3
            )
        if mode == "copy":
            others = [p for p in getattr(self, "_applied", []) if p != getattr(self, "_own", None)]
            if others:
                return StepOutput(_rehead(self.codec, others[0], step, batch), 0.0, tokens, 1e-3)
        out = honest_train(self, step, start, end, abort)
        self._own = out.payload
        if mode == "flip" or (mode == "partial" and step % 4 == 0):
            return StepOutput(_negated(self.codec, out.payload), out.loss, out.tokens, out.seconds)
        return out

    def apply(self, step, payloads):
        self._applied = list(payloads)
        return honest_apply(self, step, payloads)

    LocalReplica.train, LocalReplica.apply = train, apply

    if mode == "poison":
        honest_open = trainer_module.open_dataset

        def open_dataset(spec, split="train"):
            provider = honest_open(spec, split)
            if split == "train":
                poison = poison_tokens(spec.vocab_size, spec.max_seq_len)
                provider.sequences = lambda batch: poison.expand(len(batch), -1).clone()
            return provider

        trainer_module.open_dataset = open_dataset

    if mode == "censor":
        # it waits for results as an honest seat does (so it witnesses as early), then signs a list without
        # the lowest-indexed other trainer
        from dataclasses import replace

        from cohort.client.runtime.machine import ClientMachine, SubmitWitness
        from cohort.client.runtime.results_list import ResultsList

        honest_witness = ClientMachine._witness

        def witness(self, now):
            out = []
            for action in honest_witness(self, now):
                if isinstance(action, SubmitWitness):
                    held = dict(action.results.entries)
                    victims = sorted(i for i in held if i != self.index)
                    if victims:
                        held.pop(victims[0])
                    action = replace(action, results=ResultsList.of(action.results.step, held))
                out.append(action)
            return out

        ClientMachine._witness = witness

    if mode == "equivocate":
        from cohort.client.distro.wire import commitment as commitment_of
        from cohort.client.runtime.exchange import Exchange
        from cohort.client.runtime.messages import Result
        from cohort.sdk.statements import result_statement

        honest_publish = Exchange.publish

        async def publish(self, step, batch, commitment, payload):
            await honest_publish(self, step, batch, commitment, payload)
            twin = bytearray(payload)
            twin[-1] ^= 1  # a second, different result for the same step (its commitment differs)
            other = commitment_of(bytes(twin))
            self.node.store.put_verified(other, bytes(twin), step)
            epoch = self.view.run.epoch_number if self.view is not None else 0
            signature = self.key.sign(
                result_statement(self.idl, self.run_address, epoch, step, batch, other)
            )
            await self.node.announce(
                step, Result(step, *batch, other, len(twin), signature).encode()
            )

        Exchange.publish = publish


def main() -> None:
    install(os.environ.get("COHORT_ADVERSARY", ""))
    from cohort.sdk.cli import main as cli

    sys.argv[0] = "cohort"
    cli()


if __name__ == "__main__":
    main()
