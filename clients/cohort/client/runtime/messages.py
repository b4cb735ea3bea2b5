"""What clients gossip to each other during an epoch (inside signed announcements; see p2p.announcement).

    Ready     kind 1 | epoch u32                      model loaded, P2P up: ready to train this epoch
    Result    kind 2 | step u64 | batch [start, end) u64 u64 | commitment 32 | size u32 | signature 64
                                                      my result of `step`: the blob whose sha256 is
                                                      `commitment`; the signature is my node key's over
                                                      the chain's result statement (statements.py), so two
                                                      different Results of one step are a proof anyone
                                                      can submit (report_equivocation)

Big-endian, fixed sizes, strictly decoded: anything else is refused with a reason. The announcement's
signature says who sent it; these bodies never name their sender.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

_READY = struct.Struct(">BI")
_RESULT = struct.Struct(">BQQQ32sI64s")
READY, RESULT = 1, 2
MAX_RESULT_BYTES = 1 << 30  # a result blob is never larger than this (a 1B model's is ~2.5 MB)


class MessageError(ValueError):
    """A gossip body that is not one of ours."""


@dataclass(frozen=True)
class Ready:
    epoch: int

    def encode(self) -> bytes:
        return _READY.pack(READY, self.epoch)


@dataclass(frozen=True)
class Result:
    step: int
    batch_start: int
    batch_end: int
    commitment: bytes  # sha256 of the payload: also its blob id
    size: int
    signature: bytes  # the trainer's node key over statements.result_statement(run, epoch, step, batch, commitment)

    @property
    def batch(self) -> tuple[int, int]:
        return (self.batch_start, self.batch_end)

    def encode(self) -> bytes:
        return _RESULT.pack(RESULT, self.step, self.batch_start, self.batch_end, self.commitment, self.size,
                            self.signature)  # fmt: skip


Message = Ready | Result


def decode_message(body: bytes) -> Message:
    if not body:
        raise MessageError("empty message")
    kind = body[0]
    layout = {READY: _READY, RESULT: _RESULT}.get(kind)
    if layout is None:
        raise MessageError(f"unknown message kind {kind}")
    if len(body) != layout.size:
        raise MessageError(f"message kind {kind} is {layout.size} bytes, got {len(body)}")
    fields = layout.unpack(body)[1:]
    if kind == READY:
        return Ready(*fields)
    result = Result(*fields)
    if not result.batch_start < result.batch_end:
        raise MessageError(f"result batch [{result.batch_start}, {result.batch_end}) is empty")
    if not 0 < result.size <= MAX_RESULT_BYTES:
        raise MessageError(f"result size {result.size} is out of range")
    return result
