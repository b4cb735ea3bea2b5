"""A run played on the coordinator's host build alone (no chain, no RPC): real Run bytes, moved through
every phase by the very rules the program runs, with time and slots under the test's control. The client
state machine's tests feed these states to it."""

from __future__ import annotations

import functools
import hashlib
import struct
from typing import Any

from solders.keypair import Keypair

from cohort.sdk.coordinator_core import CoordinatorCore, Env
from cohort.sdk.models import Run
from support.coordinator_chain import make_config, make_model

T0 = 1_767_225_600


@functools.cache
def _slot_hash(slot: int) -> bytes:
    return hashlib.sha256(struct.pack("<Q", slot)).digest()


class HostRun:
    def __init__(self, core: CoordinatorCore, clients: int = 3, **config: Any) -> None:
        self.core = core
        self.address = Keypair().pubkey()
        self.authority = Keypair().pubkey()
        self.state = bytearray(core.run_size)
        self.now, self.slot = T0, 1000
        self.wallets = [Keypair().pubkey() for _ in range(clients)]
        self.nodes = [Keypair().pubkey() for _ in range(clients)]
        assert core.init(self.state, b"host-run", self.authority, self.authority) == 0
        settings = make_config(clients, **config)
        progress = {"epoch": 0, "step": 1, "epoch_start_data_index": 0}
        assert core.update_config(self.state, self.env(), settings, progress) == 0
        assert core.update_model(self.state, self.env(), make_model()) == 0
        assert core.set_paused(self.state, self.env(), False) == 0

    # -- time ---------------------------------------------------------------------------------------
    def env(self) -> Env:
        """Clock and slot as the test set them; SlotHashes lists the last 512 blocks, as on chain."""
        hashes = tuple(
            (s, _slot_hash(s)) for s in range(self.slot - 1, max(self.slot - 513, 0), -1)
        )
        return Env(self.now, hashes[0][1], self.address, self.slot, hashes)

    def advance(self, seconds: int = 0, slots: int = 1) -> None:
        self.now += seconds
        self.slot += max(slots, seconds * 3)

    # -- the Run ------------------------------------------------------------------------------------
    def run(self) -> Run:
        return Run.decode(
            self.address, self.core.idl.accounts["Run"] + bytes(self.state), self.core.idl
        )

    def do(self, name: str, *args: Any) -> int:
        return getattr(self.core, name)(self.state, self.env(), *args)

    def tick(self) -> int:
        return self.do("tick")

    def start_pending(self) -> None:
        """The slot after the inputs froze: a tick starts the round."""
        self.advance(0, 1)
        assert self.tick() == 0

    def join_all(self) -> None:
        for wallet, node in zip(self.wallets, self.nodes, strict=True):
            assert self.do("join", wallet, node, b"127.0.0.1:1") == 0

    def to_warmup(self) -> Run:
        self.join_all()
        self.advance(self.run().config.waiting_for_members_extra_time)
        assert self.tick() == 0
        return self.run()

    def warm_up(self) -> Run:
        """Every member's warmup witness: the first round's inputs freeze; then the round starts."""
        run = self.run()
        for c in run.clients[: run.config.witness_nodes]:
            assert self.do("warmup_witness", c.signer, c.index) == 0
        self.start_pending()
        return self.run()

    def seats(self) -> dict[int, int]:
        return {i: p for i in range(len(self.run().clients))
                if (p := self.core.witness_seat(bytes(self.state), i)) is not None}  # fmt: skip

    def witness(
        self, index: int, root: bytes, participants: bytes = b"\xff" * 32, digest: int = 7
    ) -> int:
        run = self.run()
        args = {"step": run.progress.step, "index": index, "position": self.seats()[index],
                "participants": participants, "results_root": root, "weights_digest": digest,
                "metadata": {"loss": 0.0, "tokens_per_sec": 0.0, "bytes_sent": 0, "bytes_received": 0,
                             "eval_loss": 0.0, "eval_tokens": 0}}  # fmt: skip
        return self.core.witness(self.state, self.env(), run.clients[index].signer, args)

    def decide(self, root: bytes, digest: int = 7) -> Run:
        """A strict majority of the seats reports `root`: the step is decided and the round ends."""
        quorum = self.core.quorum(self.run().config.witness_nodes)
        for index in list(self.seats())[:quorum]:
            assert self.witness(index, root, digest=digest) == 0
        return self.run()
