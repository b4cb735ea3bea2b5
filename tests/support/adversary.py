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
    twin        signs two different valid results for every step it trains (its honest one and one with a
                tile negated) and pushes each to a different half of its peers, behind fillers that fill
                its gossip quota of the round
    clone       announces another trainer's result of the step, bytes unchanged, as its own (its own batch in
                the statement it signs); it announces nothing if it holds none in time
    squat       trains honestly, and opens 1-byte requests at offset 0 for every other trainer's result as
                soon as it is announced, one on each lane, and never reads them (held SQUAT_HOLD seconds)
    slander     trains honestly, and as a verifier reports every check it is drawn for (a dispute's too) as
                a replay mismatch, without fetching or replaying anything: two of them are a coalition
    overclaim   trains honestly, and declares OVERCLAIM tokens/s whenever it joins (16x the median's points
                once, when shares followed the declaration)
Escape modes:
    flee        sends negated payloads (as flip), and as soon as the chain's check seed draws a check of one of
                its results it leaves the run (exit_run, as Ctrl-C does) and stops serving: a cheater that takes
                what it earned and runs before the check can fetch its states

Nothing here ships with cohort: it patches the installed client in this process only, then runs the CLI."""

from __future__ import annotations

import os
import sys

import torch

MODES = ("flip", "random", "lazy", "copy", "poison", "partial", "censor", "equivocate")
# against the round itself (tests/integrity/test_round_adversaries.py), not the verifier: not among the
# modes benchmarks/integrity/adversaries.py runs by default
ROUND_MODES = ("twin", "clone", "squat")
# a verifier's lie (takes two of them to open a dispute) and a member's about its speed, in one run
# (tests/integrity/test_behaviour_adversaries.py)
COALITION_MODES = ("slander", "overclaim")
# a cheat that runs from its check (tests/integrity/test_payload_adversaries.py; benchmarks/integrity/
# adversaries.py --modes flee runs it repeatedly)
ESCAPE_MODES = ("flee",)
OVERCLAIM = 10**9  # tokens/s nobody trains at
POISON_SEED = 1234  # the adversary's "own text": a fixed token string it implants
CLONE_WAIT = 10.0  # seconds a clone waits for another trainer's result of its step
# seconds a squatter holds its unread requests (the trainer's patience once was 10 s)
SQUAT_HOLD = 10.0
PUSH_TIMEOUT = 5.0


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


def _varied(codec, payload: bytes) -> bytes:
    """Another valid result of the same step and batch: the first tile's values negated."""
    from cohort.client.distro import DistroResult
    from cohort.client.distro.compress import SparseTiles

    result = codec.decode(payload).result
    first, *rest = result.tiles
    varied = codec.encode(DistroResult(result.step, result.batch, (SparseTiles(first.indices, -first.values), *rest),
                                       result.state))  # fmt: skip
    return varied if varied != payload else _negated(codec, payload)


def _rehead(codec, payload: bytes, step: int, batch) -> bytes:
    from cohort.client.distro import DistroResult

    result = codec.decode(payload).result
    return codec.encode(
        DistroResult(step, batch, result.tiles, result.state)
    )  # the peer's state commitment too


def install(mode: str) -> None:
    """Swap one behaviour of this process's client."""
    if mode not in MODES + ROUND_MODES + COALITION_MODES + ESCAPE_MODES:
        known = ", ".join(MODES + ROUND_MODES + COALITION_MODES + ESCAPE_MODES)
        raise SystemExit(f"COHORT_ADVERSARY must be one of {known}, got {mode!r}")
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
        if mode == "twin":
            from cohort.client.distro.wire import commitment as commitment_of

            TWINS[commitment_of(out.payload)] = _varied(self.codec, out.payload)
        if mode in ("flip", "flee") or (mode == "partial" and step % 4 == 0):
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

    if mode == "overclaim":
        from cohort.client.runtime.machine.joining import Joining

        Joining.throughput = lambda self: OVERCLAIM

    if mode == "slander":
        from cohort.client.runtime.effects import Effects
        from cohort.client.runtime.machine import Checked

        async def check(self, action):
            self.c.post(Checked(action.epoch, action.step, action.trainer, False, "slandered",
                                "PayloadMismatch", action.dispute))  # fmt: skip

        Effects._check = check

    if mode == "flee":
        _install_flee()
    if mode == "twin":
        _install_twin()
    if mode == "clone":
        _install_clone()
    if mode == "squat":
        _install_squat()


def _install_flee() -> None:
    """Watch the chain's check plan for our own results (it is public: every member computes it); at the first
    check drawn on one, stop as Ctrl-C would: what is in flight finishes, then exit_run, then the process
    ends and its committed states go with it."""
    import signal

    from cohort.client.runtime.machine import ClientMachine

    honest_checks = ClientMachine._checks

    def checks(self):
        out = honest_checks(self)
        view = self.view
        if FLED or view is None or self.epoch is None:
            return out
        for step, entries in self.applied_lists.items():
            seed = view.run.check_seed(step)
            mine = any(trainer == self.index for trainer, _ in entries)
            if seed is not None and mine and self.index in self._committed_before(step):
                if self.core.check_plan(view.run.data[8:], step, seed, self.index):
                    FLED.append(step)
                    os.kill(os.getpid(), signal.SIGTERM)
                    break
        return out

    ClientMachine._checks = checks


FLED: list[int] = []  # the step whose drawn check made the flee adversary leave


# our honest result's commitment -> its twin (written by the model thread)
TWINS: dict[bytes, bytes] = {}


def _install_twin() -> None:
    """Publish each result and its twin, signed alike, to different halves of our peers, each behind as many
    fillers (Ready messages) as fill our quota of announcements per round: each half holds one statement at
    first, and only if a peer takes the other's statement past our quota do the two come together."""
    import asyncio

    from cohort.client.distro.wire import commitment as commitment_of
    from cohort.client.p2p import Announcement
    from cohort.client.p2p.gossip import PUSH_PROTOCOL, push_body
    from cohort.client.p2p.transport import RemoteError, Status, TransportError
    from cohort.client.runtime.exchange import OWN_COPIES, Exchange, own_patience
    from cohort.client.runtime.messages import Ready, Result

    honest_publish = Exchange.publish

    async def push(self, peer, announcements) -> str | None:
        """None once `peer` took the push (all of it, or what fit: its answer says what it refused)."""
        body = push_body([a.encode() for a in announcements])
        try:
            async with asyncio.timeout(PUSH_TIMEOUT):
                opened = self.node.transport.request(
                    peer, PUSH_PROTOCOL, body, open_timeout=PUSH_TIMEOUT
                )
                async with opened as reply:
                    while await reply.read():
                        pass
        except RemoteError as e:  # TOO_LARGE: past our quota (the fillers' last), it took what fit
            return None if e.status == Status.TOO_LARGE else str(e)[:120]
        except (TransportError, TimeoutError) as e:
            return str(e)[:120] or "timed out"
        return None

    async def publish(self, step, batch, commitment, payload):
        twin = TWINS.pop(commitment, None)
        if twin is None or self.view is None:
            return await honest_publish(self, step, batch, commitment, payload)
        patience = own_patience(self.view.run.config.max_round_train_time)
        gossip, key = self.node.gossip, self.node.transport.key
        fillers = gossip.config.max_per_origin_round - 1
        ready = Ready(self.view.run.progress.epoch).encode()
        sets = []
        for k, (c, data) in enumerate(((commitment, payload), (commitment_of(twin), twin))):
            self.node.store.put_verified(c, data, step, own_copies=OWN_COPIES, patience=patience)
            self._remember(c, step, batch)
            signature = self.key.sign(self._statement(step, batch, c))
            result = Result(step, *batch, c, len(data), signature).encode()
            seq = 1000 + 1000 * k
            filled = [
                Announcement.create(key, gossip.topic, step, seq + i, ready) for i in range(fillers)
            ]
            sets.append(
                [*filled, Announcement.create(key, gossip.topic, step, seq + fillers, result)]
            )
        peers = sorted(gossip.push_targets(), key=lambda p: p.node_id.key)
        half = max(1, len(peers) // 2)
        groups = (peers[:half], peers[half:])
        pushes = [push(self, p, a) for a, group in zip(sets, groups, strict=True) for p in group]
        failed = [e for e in await asyncio.gather(*pushes) if e is not None]
        self.events.emit(
            "twin_published",
            step=step,
            commitments=[commitment.hex()[:16], commitment_of(twin).hex()[:16]],
            peers=[len(g) for g in groups],
            pushed=len(pushes) - len(failed),
            failed=failed,
            fillers=fillers,
        )

    Exchange.publish = publish


def _install_clone() -> None:
    """Instead of our result, another trainer's of the same step, byte for byte, under our own batch."""
    import asyncio

    from cohort.client.runtime.exchange import Exchange
    from cohort.client.runtime.messages import MessageError, Result, decode_message

    def held_result(self, step, single: bool):
        """(trainer, commitment, bytes) of another trainer's result of `step` that we hold; with `single`,
        only of a trainer that stated one (an equivocator's result is refused already, copied or not)."""
        me = self.node.transport.node_id
        stated: dict[object, list[Result]] = {}
        for announcement in self.node.gossip.received(step):
            if announcement.origin == me:
                continue
            try:
                message = decode_message(announcement.payload)
            except MessageError:
                continue
            if isinstance(message, Result) and message.step == step:
                stated.setdefault(announcement.origin, []).append(message)
        for origin, results in stated.items():
            data = self.node.store.get(results[0].commitment)
            if data is not None and (len(results) == 1 or not single):
                return self.by_node.get(origin.key), results[0].commitment, data
        return None

    async def publish(self, step, batch, commitment, payload):
        loop = asyncio.get_running_loop()
        started = loop.time()
        while (
            found := held_result(self, step, single=loop.time() < started + CLONE_WAIT / 2)
        ) is None:
            if loop.time() > started + CLONE_WAIT:
                self.events.emit("clone_missed", step=step)
                return
            await asyncio.sleep(0.05)
        original, copied, data = found
        signature = self.key.sign(self._statement(step, batch, copied))
        await self.node.announce(step, Result(step, *batch, copied, len(data), signature).encode())
        self.events.emit("cloned", step=step, original=original, commitment=copied.hex()[:16])

    Exchange.publish = publish


def _install_squat() -> None:
    """On every other trainer's result announced: one 1-byte request at offset 0 on each lane, left unread."""
    import asyncio
    from contextlib import AsyncExitStack

    from cohort.client.p2p.blob_protocol import BLOB_PROTOCOL, part_request
    from cohort.client.p2p.transport import MAX_LANES, TransportError
    from cohort.client.runtime.exchange import Exchange
    from cohort.client.runtime.messages import MessageError, Result, decode_message

    honest_on_message = Exchange.on_message

    async def squat(self, sender, result):
        peer = self.members.get(sender)
        if peer is None:
            return
        request = part_request(result.commitment, 0, 1)
        refused = []
        async with AsyncExitStack() as held:

            async def ask(lane: int) -> bool:
                try:
                    opened = self.node.transport.request(
                        peer, BLOB_PROTOCOL, request, open_timeout=PUSH_TIMEOUT, lane=lane
                    )
                    await held.enter_async_context(opened)
                    return True
                except TransportError as e:
                    refused.append(str(e)[:80])
                    return False

            # all lanes at once: the first requests a trainer answers are the ones that count
            granted = sum(await asyncio.gather(*(ask(lane) for lane in range(MAX_LANES))))
            self.events.emit(
                "squatted", step=result.step, trainer=sender, granted=granted, refused=refused
            )
            await asyncio.sleep(SQUAT_HOLD)  # never read: the replies wait in their streams

    def on_message(self, announcement):
        sender = self.by_node.get(announcement.origin.key)
        try:
            message = decode_message(announcement.payload)
        except MessageError:
            message = None
        if isinstance(message, Result) and sender is not None and sender in self.members:
            self._spawn(squat(self, sender, message))  # before our own fetch of it is even planned
        honest_on_message(self, announcement)

    Exchange.on_message = on_message


def main() -> None:
    install(os.environ.get("COHORT_ADVERSARY", ""))
    from cohort.sdk.cli import main as cli

    sys.argv[0] = "cohort"
    cli()


if __name__ == "__main__":
    main()
