"""What clients gossip to each other during an epoch (inside signed announcements; see p2p.announcement).

    Ready     kind 1 | epoch u32                      model loaded, P2P up: ready to train this epoch
    Result    kind 2 | step u64 | batch [start, end) u64 u64 | commitment 32 | size u32
                                                      my result of `step`: the blob whose sha256 is `commitment`
    Finished  kind 3 | step u64                       I trained `step` and hold every result of `step - 1`

Big-endian, fixed sizes, strictly decoded: anything else is refused with a reason. The announcement's
signature says who sent it; these bodies never name their sender.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

_READY = struct.Struct(">BI")
_RESULT = struct.Struct(">BQQQ32sI")
_FINISHED = struct.Struct(">BQ")
READY, RESULT, FINISHED = 1, 2, 3
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

    def encode(self) -> bytes:
        return _RESULT.pack(RESULT, self.step, self.batch_start, self.batch_end, self.commitment, self.size)


@dataclass(frozen=True)
class Finished:
    step: int

    def encode(self) -> bytes:
        return _FINISHED.pack(FINISHED, self.step)


Message = Ready | Result | Finished


def decode_message(body: bytes) -> Message:
    if not body:
        raise MessageError("empty message")
    kind = body[0]
    layout = {READY: _READY, RESULT: _RESULT, FINISHED: _FINISHED}.get(kind)
    if layout is None:
        raise MessageError(f"unknown message kind {kind}")
    if len(body) != layout.size:
        raise MessageError(f"message kind {kind} is {layout.size} bytes, got {len(body)}")
    fields = layout.unpack(body)[1:]
    if kind == READY:
        return Ready(*fields)
    if kind == FINISHED:
        return Finished(*fields)
    result = Result(*fields)
    if not result.batch_start < result.batch_end:
        raise MessageError(f"result batch [{result.batch_start}, {result.batch_end}) is empty")
    if not 0 < result.size <= MAX_RESULT_BYTES:
        raise MessageError(f"result size {result.size} is out of range")
    return result
