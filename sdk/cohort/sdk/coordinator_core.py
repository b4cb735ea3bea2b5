"""The coordinator's pure core, loaded from its host build: the very rules the chain runs, for predictions
("what would a tick do now", "who witnesses this round", "which batches are mine") and for tests.

State is the Run account's bytes after the 8-byte discriminator; arguments are the IDL's Borsh encodings,
which are byte-for-byte the C structs.
"""

from __future__ import annotations

import ctypes
import struct
from dataclasses import dataclass
from pathlib import Path

from solders.pubkey import Pubkey

from . import artifacts
from .idl import Idl

COORDINATOR_DIR = artifacts.CHECKOUT_CONTRACTS / "coordinator"  # the sources (checkout only)
IDL_PATH = artifacts.CHECKOUT_FILES[
    artifacts.IDL_FILE
]  # the checkout's; load_idl also finds the packaged one


def load_idl() -> Idl:
    return Idl.load(artifacts.idl_path())


class _Env(ctypes.Structure):
    _fields_ = [
        ("now", ctypes.c_int64),
        ("slot", ctypes.c_uint64),
        ("slot_hashes", ctypes.c_void_p),
        ("slot_hashes_len", ctypes.c_uint64),
        ("run_key", ctypes.c_void_p),
    ]


class _Conviction(ctypes.Structure):
    _fields_ = [("index", ctypes.c_uint16), ("reason", ctypes.c_uint8), ("step", ctypes.c_uint32),
                ("forfeited", ctypes.c_uint64)]  # fmt: skip


UNKNOWN_SLOT = 2**64 - 1  # "some slot after every stored one": a pending round seed can be resolved


@dataclass(frozen=True)
class Env:
    """What the chain tells an instruction: Clock time, the latest slot hash, the Run account's address,
    the slot it runs in and the SlotHashes entries ((slot, hash), newest first; by default `slot_hash` as
    the previous slot's, then slot 0's). Predictions that do not know the slot leave it unknown."""

    now: int
    slot_hash: bytes
    run_key: Pubkey
    slot: int = UNKNOWN_SLOT
    slot_hashes: tuple[tuple[int, bytes], ...] | None = None

    def slot_hashes_data(self) -> bytes:
        """The SlotHashes sysvar's data: u64 count, then (u64 slot, 32-byte hash) entries."""
        entries = self.slot_hashes
        if entries is None:
            # slot_hash follows any frozen slot; the zero-slot entry after it proves no block in between aged
            # out (the chain re-freezes a pending round's inputs when SlotHashes cannot prove that)
            latest = max(self.slot, 1) - 1 if self.slot != UNKNOWN_SLOT else UNKNOWN_SLOT - 1
            entries = ((latest, self.slot_hash), (0, bytes(32)))
        return struct.pack("<Q", len(entries)) + b"".join(
            struct.pack("<Q", slot) + bytes(h) for slot, h in entries
        )


class CoordinatorCore:
    """ctypes binding of the coordinator's host library (packaged, or the checkout's build; never compiled
    here: `cohort build` does that)."""

    def __init__(self, library: Path | None = None, idl: Idl | None = None) -> None:
        self.lib = ctypes.CDLL(str(library or artifacts.host_library()))
        self.idl = idl or load_idl()
        self.run_size = self.idl.account_size("Run") - 8
        self.lib.coord_host_run_size.restype = ctypes.c_uint64
        if self.lib.coord_host_run_size() != self.run_size:
            raise RuntimeError("the host library and the IDL disagree on the Run layout; rebuild")
        for name in ("coord_tick", "coord_join", "coord_exit", "coord_warmup_witness", "coord_witness",
                     "coord_health_check", "coord_checkpoint", "coord_set_paused", "coord_update_config",
                     "coord_update_model", "coord_update_metadata", "coord_set_checkpointers", "coord_init",
                     "coord_claim_points", "coord_settle_points", "coord_vote_weights", "coord_convict",
                     "coord_report_check"):  # fmt: skip
            getattr(self.lib, name).restype = ctypes.c_uint64
        self.lib.coord_host_take_events.restype = ctypes.c_uint64
        self.lib.coord_witness_position.restype = ctypes.c_uint64
        self.lib.coord_witness_position.argtypes = [ctypes.c_char_p, ctypes.c_uint16]
        self.lib.coord_witness_seat.restype = ctypes.c_uint64
        self.lib.coord_witness_seat.argtypes = [ctypes.c_char_p, ctypes.c_uint16]
        self.lib.coord_witness_order.restype = ctypes.c_uint64
        self.lib.coord_trainer_order.restype = ctypes.c_uint64
        self.lib.coord_batch_size.restype = ctypes.c_uint32
        self.lib.coord_witness_quorum.restype = ctypes.c_uint16
        self.lib.coord_withdraw_pending_join.restype = ctypes.c_bool
        self.lib.coord_points_unclaimed.restype = ctypes.c_bool
        self.lib.coord_assignment.restype = ctypes.c_uint64
        self.lib.coord_check_plan.restype = ctypes.c_uint64
        self.lib.coord_check_plan.argtypes = [ctypes.c_char_p, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_uint16,
                                              ctypes.c_void_p]  # fmt: skip
        self.lib.coord_check_seed.restype = ctypes.c_uint64
        self.lib.coord_dispute_committee.restype = ctypes.c_uint64
        self.lib.coord_dispute_committee.argtypes = [
            ctypes.c_char_p,
            ctypes.c_uint32,
            ctypes.c_uint16,
            ctypes.c_void_p,
        ]
        self.lib.coord_check_seed.argtypes = [ctypes.c_char_p, ctypes.c_uint32, ctypes.c_void_p]
        for name in ("coord_check_config", "coord_check_model", "coord_check_model_fits_config",
                     "coord_check_progress", "coord_check_metadata"):  # fmt: skip
            getattr(self.lib, name).restype = ctypes.c_uint64

    # -- plumbing -------------------------------------------------------------------------------------
    def _state(self, run: bytearray):
        if len(run) != self.run_size:
            raise ValueError(f"Run state must be {self.run_size} bytes, got {len(run)}")
        return (ctypes.c_char * len(run)).from_buffer(run)

    @staticmethod
    def _env(env: Env) -> tuple[_Env, tuple[ctypes.Array, ctypes.Array]]:
        key = ctypes.create_string_buffer(bytes(env.run_key), 32)
        data = env.slot_hashes_data()
        hashes = ctypes.create_string_buffer(data, len(data))
        c_env = _Env(env.now, env.slot, ctypes.cast(hashes, ctypes.c_void_p), len(data),
                     ctypes.cast(key, ctypes.c_void_p))  # fmt: skip
        return c_env, (key, hashes)

    @staticmethod
    def _key(key: Pubkey) -> ctypes.Array:
        return ctypes.create_string_buffer(bytes(key), 32)

    def _call(self, name: str, run: bytearray, env: Env, *args) -> int:
        state = self._state(run)
        c_env, _keep = self._env(env)
        return getattr(self.lib, name)(state, ctypes.byref(c_env), *args)

    def _args(self, type_name: str, value: dict) -> ctypes.Array:
        return ctypes.create_string_buffer(self.idl.encode({"defined": {"name": type_name}}, value))

    def _ix_args(self, instruction: str, value: dict) -> ctypes.Array:
        """An instruction's argument struct, as the program reads it after the discriminator."""
        return ctypes.create_string_buffer(self.idl.instruction_data(instruction, value)[8:])

    def take_events(self) -> list[tuple[str, dict]]:
        buffer = ctypes.create_string_buffer(64 * 1024)
        n = self.lib.coord_host_take_events(buffer, len(buffer))
        raw, events, at = buffer.raw[:n], [], 0
        while at < n:
            length = int.from_bytes(raw[at : at + 4], "little")
            event = self.idl.decode_event(raw[at + 4 : at + 4 + length])
            if event is not None:
                events.append(event)
            at += 4 + length
        return events

    # -- operations: each returns 0 or the program error code -----------------------------------------
    def init(self, run: bytearray, run_id: bytes, authority: Pubkey, join_authority: Pubkey) -> int:
        return self.lib.coord_init(
            self._state(run),
            run_id.ljust(32, b"\0"),
            self._key(authority),
            self._key(join_authority),
        )

    def tick(self, run: bytearray, env: Env) -> int:
        return self._call("coord_tick", run, env)

    def join(
        self,
        run: bytearray,
        env: Env,
        signer: Pubkey,
        p2p_identity: Pubkey,
        endpoint: bytes = b"",
        throughput: int = 0,
    ) -> int:
        """The core's part of join_run (the program checks the node key's signature before it)."""
        args = {
            "p2p_identity": p2p_identity,
            "endpoint": endpoint,
            "throughput": throughput,
        }  # the coder NUL-pads it
        return self._call(
            "coord_join", run, env, self._key(signer), self._ix_args("join_run", args)
        )

    def exit(self, run: bytearray, env: Env, signer: Pubkey) -> int:
        """The core's part of exit_run (the program keeps the wallet's points in its Points account)."""
        points = ctypes.c_uint64()
        return self._call("coord_exit", run, env, self._key(signer), ctypes.byref(points))

    def claim_points(self, run: bytearray, signer: Pubkey) -> int:
        points = ctypes.c_uint64()
        return self.lib.coord_claim_points(
            self._state(run), self._key(signer), ctypes.byref(points)
        )

    def withdraw_pending_join(self, run: bytearray, signer: Pubkey) -> bool:
        """What revoking or closing a wallet's JoinAuthorization does to the run: True if it was pending."""
        return bool(self.lib.coord_withdraw_pending_join(self._state(run), self._key(signer)))

    def settle_points(self, run: bytearray, wallet: Pubkey) -> int:
        points = ctypes.c_uint64()
        return self.lib.coord_settle_points(
            self._state(run), self._key(wallet), ctypes.byref(points)
        )

    def points_unclaimed(self, run: bytes) -> bool:
        return bool(self.lib.coord_points_unclaimed(ctypes.c_char_p(bytes(run))))

    def vote_weights(self, run: bytearray, env: Env, signer: Pubkey, args: dict) -> int:
        return self._call(
            "coord_vote_weights", run, env, self._key(signer), self._ix_args("vote_weights", args)
        )

    def convict(self, run: bytearray, env: Env, index: int, reason: int, step: int) -> int:
        """The core's part of report_equivocation (the program checks the two signed statements first)."""
        conviction = _Conviction(index, reason, step, 0)
        return self._call("coord_convict", run, env, ctypes.byref(conviction))

    def report_check(self, run: bytearray, env: Env, signer: Pubkey, args: dict) -> int:
        """report_check: `args` are step, trainer (epoch index) and reason (a CheckFailure name)."""
        return self._call(
            "coord_report_check", run, env, self._key(signer), self._ix_args("report_check", args)
        )

    def check_seed(self, run: bytes, step: int) -> int | None:
        """The seed that draws the checks of `step` (the seed of the round of step + CHECK_SEED_LAG), or None
        while it is not revealed yet, or once it left the chain's window (reports of `step` are refused
        then)."""
        seed = ctypes.c_uint64()
        return (
            seed.value
            if self.lib.coord_check_seed(bytes(run), step, ctypes.byref(seed)) == 0
            else None
        )

    def check_plan(self, run: bytes, step: int, seed: int, trainer: int) -> tuple[int, ...]:
        """The verifiers (epoch indices, in order) that `seed` draws to check trainer `trainer`'s result of
        `step`, or () when that result is not checked. `seed` is `check_seed(run, step)`."""
        out = (ctypes.c_uint16 * self.idl.constants["MAX_VERIFIERS"])()
        n = self.lib.coord_check_plan(bytes(run), step, ctypes.c_uint64(seed), trainer, out)
        return tuple(out[:n])

    def dispute_committee(self, run: bytes, step: int, trainer: int) -> frozenset[int]:
        """The committee (epoch indices) of the open dispute of trainer `trainer`'s result of `step`, or an
        empty set: no such dispute is open, or the seed that draws its committee is not revealed yet."""
        out = (ctypes.c_uint8 * 32)()
        if not self.lib.coord_dispute_committee(bytes(run), step, trainer, out):
            return frozenset()
        return frozenset(i for i in range(256) if out[i // 8] >> (i % 8) & 1)

    def witness_seat(self, run: bytes, index: int) -> int | None:
        """Epoch client `index`'s seat (its witness position) in the current round, or None: seats are
        the first witness_nodes positions of the round's witness order whose client is healthy (and no
        persistent dissenter) or has already witnessed."""
        seat = self.lib.coord_witness_seat(bytes(run), index)
        return None if seat == 2**64 - 1 else seat

    def warmup_witness(self, run: bytearray, env: Env, signer: Pubkey, index: int) -> int:
        return self._call(
            "coord_warmup_witness", run, env, self._key(signer), ctypes.c_uint16(index)
        )

    def witness(self, run: bytearray, env: Env, signer: Pubkey, args: dict) -> int:
        return self._call(
            "coord_witness", run, env, self._key(signer), self._ix_args("witness", args)
        )

    def health_check(self, run: bytearray, env: Env, signer: Pubkey, args: dict) -> int:
        return self._call(
            "coord_health_check", run, env, self._key(signer), self._ix_args("health_check", args)
        )

    def checkpoint(self, run: bytearray, env: Env, signer: Pubkey, checkpoint: dict) -> int:
        return self._call(
            "coord_checkpoint", run, env, self._key(signer), self._args("Checkpoint", checkpoint)
        )

    def set_paused(self, run: bytearray, env: Env, paused: bool) -> int:
        return self._call("coord_set_paused", run, env, ctypes.c_bool(paused), None)

    def update_config(self, run: bytearray, env: Env, config: dict, progress: dict) -> int:
        return self._call("coord_update_config", run, env, self._args("RunConfig", config),
                          self._args("Progress", progress), None)  # fmt: skip

    def update_model(self, run: bytearray, env: Env, model: dict) -> int:
        return self._call("coord_update_model", run, env, self._args("ModelConfig", model), None)

    # -- predictions ----------------------------------------------------------------------------------
    def round_bytes(self, run: bytes, back: int = 0) -> bytes | None:
        """Raw bytes of the current round (back=0) or an earlier one of this epoch (sliced, not decoded)."""
        idl = self.idl
        rounds_at = idl.offset_of("Run", "epoch", "rounds")
        head_at = idl.offset_of("Run", "epoch", "rounds_head")
        round_size = idl.size_of({"defined": {"name": "Round"}})
        count = idl.constants["NUM_ROUNDS"]
        height_at = idl.offset_of("Round", "height")
        head = int.from_bytes(run[head_at : head_at + 4], "little") % count
        current = rounds_at + head * round_size
        height = int.from_bytes(run[current + height_at : current + height_at + 4], "little")
        if back > height or back >= count:
            return None
        start = rounds_at + (head + count - back) % count * round_size
        return bytes(run[start : start + round_size])

    def round_records(self, run: bytes, back: int = 0) -> bytes | None:
        """Raw witness records (MAX_WITNESSES of them) of the round `round_bytes(run, back)` returns."""
        idl = self.idl
        head_at = idl.offset_of("Run", "epoch", "rounds_head")
        count = idl.constants["NUM_ROUNDS"]
        if self.round_bytes(run, back) is None:
            return None
        head = int.from_bytes(run[head_at : head_at + 4], "little") % count
        size = idl.size_of({"defined": {"name": "RoundWitnesses"}})
        start = idl.offset_of("Run", "witnesses") + (head + count - back) % count * size
        return bytes(run[start : start + size])

    def witness_position(self, round_: bytes, index: int) -> int | None:
        position = self.lib.coord_witness_position(round_, index)
        return None if position == 2**64 - 1 else position

    def witness_order(self, round_: bytes) -> list[int]:
        """The round's witness order: out[p] = the epoch index at position p."""
        out = (ctypes.c_uint16 * 256)()
        n = self.lib.coord_witness_order(round_, out)
        return list(out[:n])

    def trainer_order(self, round_: bytes) -> list[int]:
        out = (ctypes.c_uint16 * 256)()
        n = self.lib.coord_trainer_order(round_, out)
        return list(out[:n])

    def batch_size(self, run: bytes, data_index: int) -> int:
        """Sequences of the round starting at `data_index` under the run's config and model (the ramp)."""
        idl = self.idl
        config_at, model_at = idl.offset_of("Run", "config"), idl.offset_of("Run", "model")
        config = run[config_at : config_at + idl.size_of({"defined": {"name": "RunConfig"}})]
        model = run[model_at : model_at + idl.size_of({"defined": {"name": "ModelConfig"}})]
        return self.lib.coord_batch_size(bytes(config), bytes(model), ctypes.c_uint64(data_index))

    def quorum(self, witness_nodes: int) -> int:
        return self.lib.coord_witness_quorum(ctypes.c_uint16(witness_nodes))

    def assignment(self, run: bytes, round_: bytes) -> dict[int, tuple[int, int]]:
        """Epoch client index -> the batch [start, end) it trains in `round_` (one round's summary bytes,
        stored or predicted), sized by the members' shares in `run` (the state after the discriminator)."""
        order = self.trainer_order(round_)
        starts, ends = (ctypes.c_uint64 * 256)(), (ctypes.c_uint64 * 256)()
        n = self.lib.coord_assignment(bytes(run), round_, starts, ends)
        return {order[k]: (starts[k], ends[k]) for k in range(n) if ends[k] > starts[k]}

    # -- validation: the program's own rules, run before anything is sent ------------------------------
    def _check(self, name: str, *args) -> Violation | None:
        why = ctypes.c_char_p()
        code = getattr(self.lib, name)(*args, ctypes.byref(why))
        if code == 0:
            return None
        known = self.idl.error(code)
        rule = why.value.decode() if why.value else (known.msg if known else f"error {code}")
        return Violation(known.name if known else str(code), rule)

    def check_config(self, config: dict) -> Violation | None:
        return self._check("coord_check_config", self._args("RunConfig", config))

    def check_model(self, model: dict) -> Violation | None:
        return self._check("coord_check_model", self._args("ModelConfig", model))

    def check_model_fits_config(self, model: dict, config: dict) -> Violation | None:
        return self._check(
            "coord_check_model_fits_config",
            self._args("ModelConfig", model),
            self._args("RunConfig", config),
        )

    def check_progress(self, progress: dict) -> Violation | None:
        return self._check("coord_check_progress", self._args("Progress", progress))

    def check_metadata(self, metadata: dict) -> Violation | None:
        return self._check("coord_check_metadata", self._args("RunMetadata", metadata))


@dataclass(frozen=True)
class Violation:
    """A config rule the program would reject: the IDL error name and the rule's text."""

    error: str
    rule: str
