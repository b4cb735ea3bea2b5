"""What a check fetches of a trainer's committed states, and what it makes of them.

A check does not need a trainer's whole state (4 B/param + 8 B per kept coefficient, twice): the replay's
forward/backward reads the weights every replica holds and, through the lookahead, only the *sign* of each
momentum value; the momentum and last transmission themselves enter the step tile by tile. So the check's
seed samples `CHECK_SAMPLES` runs of whole tile bands (one part's worth of values each: `sample_values`), and
the verifier fetches the state's sign plane (2 bits a value) before the step, and the parts holding the
sampled bands of the state before and after it. It replays the whole forward/backward and compares the
payload's tiles and the states on the sampled bands only: ~0.25 B/param + ~2 × 8 parts per check instead of
~16 B/param (a part is 1 MiB from ~64M parameters up, 1/256 of the state below: `state.part_size`), and the
same parts serve every verifier of the check (content-addressed: any holder may serve them).

The sample is drawn from the check's seed, fixed on chain after the trainer committed its state, so the
trainer cannot know which bands will be read; every verifier of one check draws the same bands, so their
verdicts (and anyone's rerun of the check) rest on the same bytes.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..distro import DistroOptimizer, Layout, SparseTiles
from ..distro.layout import BandSlice
from ..p2p.manifest import FileEntry, Manifest
from .state import (
    BEFORE_ANY_STEP,
    HEADER,
    MAGIC,
    SIGNS_FILE,
    STATE_FILE,
    STREAM_VALUES,
    VERSION,
    StateError,
    decode_state,
    part_size,
    sign_codes,
    signs_of,
    signs_size,
    state_size,
)

SAMPLE_VALUES = 1 << 18  # momentum values in one sampled run of bands, at most (1 MiB of the state)
CHECK_SAMPLES = 8  # runs a check compares (every run, for models with fewer)


class MissingPart(LookupError):
    """A part of a committed state that the verifier did not fetch (its own gap, not the trainer's)."""


@dataclass(frozen=True)
class Sample:
    """One sampled run of whole tile bands: rows `band` of bucket `bucket`."""

    bucket: int
    band: BandSlice


@dataclass(frozen=True)
class CommittedParts:
    """A committed state as a verifier holds it: its manifest (which hashes to the commitment) and the parts
    it fetched, by hash (each checked against its hash on arrival)."""

    manifest: Manifest
    parts: Mapping[bytes, bytes]

    @property
    def commitment(self) -> bytes:
        return self.manifest.hash()

    def file(self, name: str) -> FileEntry:
        for f in self.manifest.files:
            if f.name == name:
                return f
        raise StateError(f"the committed state lists no {name}")

    def read(self, name: str, offset: int, size: int) -> bytes:
        """Bytes [offset, offset + size) of file `name`, from the parts that hold them."""
        entry = self.file(name)
        if offset < 0 or size < 0 or offset + size > entry.size:
            raise StateError(f"{name} holds {entry.size} bytes, not [{offset}, {offset + size})")
        out, step = bytearray(), self.manifest.chunk_size
        for k in range(offset // step, -(-(offset + size) // step)):
            part = self.parts.get(entry.chunks[k])
            if part is None:
                raise MissingPart(f"part {k} of {name} was not fetched")
            base = k * step
            out += part[max(offset, base) - base : min(offset + size, base + step) - base]
        if len(out) != size:  # a part shorter than its place in the file
            raise StateError(
                f"the parts of {name} hold {len(out)} of bytes [{offset}, {offset + size})"
            )
        return bytes(out)


class PartsOnDisk(Mapping[bytes, bytes]):
    """Fetched parts kept in one file instead of memory while a check waits and runs (the sign plane alone is
    0.25 B/param); read back part by part. Removes its file on `close`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = open(path, "w+b")  # lives as long as the check
        self._at: dict[bytes, tuple[int, int]] = {}
        self._end = 0

    @classmethod
    def unique(cls, folder: Path, prefix: str) -> PartsOnDisk:
        """In a new file of its own in `folder`: two checks of one step and trainer at once (a check still
        running when the dispute the others' reports opened starts it again) never share one."""
        fd, name = tempfile.mkstemp(prefix=f"{prefix}-", suffix=".parts", dir=folder)
        os.close(fd)
        return cls(Path(name))

    def add(self, blob: bytes, data: bytes) -> None:
        if blob not in self._at:
            os.pwrite(self._file.fileno(), data, self._end)
            self._at[blob] = (self._end, len(data))
            self._end += len(data)

    def __getitem__(self, blob: bytes) -> bytes:
        offset, size = self._at[blob]
        return os.pread(self._file.fileno(), size, offset)

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._at)

    def __len__(self) -> int:
        return len(self._at)

    @property
    def size(self) -> int:
        return self._end

    def close(self) -> None:
        self._file.close()
        self.path.unlink(missing_ok=True)


def state_manifest(data: bytes, layout: Layout) -> Manifest:
    """A committed state's manifest, refused (StateError) unless it is one of this layout's: its two files of
    the sizes the layout gives, in the layout's parts (`part_size`)."""
    try:
        manifest = Manifest.decode(data)
    except ValueError as e:
        raise StateError(f"not a state manifest: {e}") from None
    sizes = {f.name: f.size for f in manifest.files}
    part = part_size(layout)
    if manifest.chunk_size != part or set(sizes) != {SIGNS_FILE, STATE_FILE}:
        raise StateError(
            f"a state manifest lists {SIGNS_FILE} and {STATE_FILE} in parts of {part} bytes"
        )
    if sizes[SIGNS_FILE] != signs_size(layout):
        raise StateError(
            f"its sign plane is {sizes[SIGNS_FILE]} bytes, expected {signs_size(layout)}"
        )
    if sizes[STATE_FILE] not in (state_size(layout, False), state_size(layout, True)):
        raise StateError(
            f"its state is {sizes[STATE_FILE]} bytes, which no state of this layout is"
        )
    return manifest


def manifest_limit(layout: Layout) -> int:
    """The most bytes a valid state manifest of `layout` can take (a fetch limit): ~70 B per part."""
    part = part_size(layout)
    parts = -(-signs_size(layout) // part) + -(-state_size(layout, True) // part)
    return 256 + 70 * parts


def commit(data: bytes, layout: Layout) -> CommittedParts:
    """The committed form of state bytes held whole in memory (tests and studies), with every part."""
    state = decode_state(data, layout)
    signs = b"".join(sign_codes(m.reshape(-1).numpy()).tobytes() for m in state.momentum)
    parts: dict[bytes, bytes] = {}
    files, step = [], part_size(layout)
    for name, blob in ((SIGNS_FILE, signs), (STATE_FILE, bytes(data))):
        hashes = []
        for lo in range(0, len(blob), step):
            piece = blob[lo : lo + step]
            h = hashlib.sha256(piece).digest()
            parts[h] = piece
            hashes.append(h)
        files.append(FileEntry(name, len(blob), tuple(hashes)))
    return CommittedParts(Manifest(step, tuple(files)), parts)


def sample_values(layout: Layout) -> int:
    """Momentum values in one sampled run of bands: one part's worth (a check reads whole parts)."""
    return min(SAMPLE_VALUES, part_size(layout) // 4)


def sample_seed(check_seed: int, trainer: int, step: int) -> bytes:
    """The seed of one check's sample: the chain's check seed of `step`, bound to the checked trainer."""
    return hashlib.sha256(b"cohort/check-sample" + check_seed.to_bytes(8, "little")
                          + trainer.to_bytes(4, "little") + step.to_bytes(8, "little")).digest()  # fmt: skip


def sample_bands(layout: Layout, seed: bytes, count: int = CHECK_SAMPLES) -> tuple[Sample, ...]:
    """`count` distinct runs of whole tile bands (every run when there are no more), drawn from `seed`, in
    model order."""
    values = sample_values(layout)
    runs = [Sample(i, band) for i, b in enumerate(layout.buckets) for band in b.bands(values)]
    if len(runs) <= count:
        return tuple(runs)
    chosen: set[int] = set()
    for n in range(64 * count):  # distinct draws; the bound is never reached in practice
        if len(chosen) == count:
            break
        draw = hashlib.sha256(seed + n.to_bytes(4, "little")).digest()
        chosen.add(int.from_bytes(draw[:8], "little") % len(runs))
    return tuple(runs[k] for k in sorted(chosen))


# -- where a sample lies in state.bin and signs.bin ----------------------------------------------------------


def _momentum_offsets(layout: Layout) -> list[int]:
    offsets, at = [], HEADER.size
    for b in layout.buckets:
        offsets.append(at)
        at += 4 * b.numel
    return offsets


def _sent_offsets(layout: Layout) -> list[int]:
    offsets, at = [], HEADER.size + sum(4 * b.numel for b in layout.buckets)
    for b in layout.buckets:
        offsets.append(at)
        at += 8 * b.kept
    return offsets


def _spans(layout: Layout, samples: Sequence[Sample], has_sent: bool) -> list[tuple[int, int]]:
    """(offset, size) in state.bin of the header and of each sample's momentum rows and sent tiles."""
    spans = [(0, HEADER.size)]
    momentum, sent = _momentum_offsets(layout), _sent_offsets(layout)
    for s in samples:
        b, band = layout.buckets[s.bucket], s.band
        spans.append(
            (
                momentum[s.bucket] + 4 * band.start * b.row_width,
                4 * (band.end - band.start) * b.row_width,
            )
        )
        if has_sent:
            tiles, k = band.tiles, b.topk
            count = 4 * (tiles.stop - tiles.start) * k
            spans.append((sent[s.bucket] + 4 * tiles.start * k, count))
            spans.append((sent[s.bucket] + 4 * b.kept + 4 * tiles.start * k, count))
    return spans


def _has_sent(manifest: Manifest, layout: Layout) -> bool:
    size = next(f.size for f in manifest.files if f.name == STATE_FILE)
    return size == state_size(layout, True)


def _state_parts(layout: Layout, samples: Sequence[Sample], has_sent: bool) -> list[int]:
    """The indices of the parts of state.bin that hold its header and the sampled bands, in order."""
    wanted: dict[int, None] = {}
    part = part_size(layout)
    for offset, size in _spans(layout, samples, has_sent):
        wanted.update(dict.fromkeys(range(offset // part, -(-(offset + size) // part))))
    return list(wanted)


def parts_to_fetch(
    layout: Layout, samples: Sequence[Sample], before: Manifest, after: Manifest
) -> list[bytes]:
    """The hashes of the parts a check reads (each once): the sign plane of the state before the step, and
    the parts of both states that hold the header and the sampled bands."""
    wanted: dict[bytes, None] = {}
    for f in before.files:
        if f.name == SIGNS_FILE:
            wanted.update(dict.fromkeys(f.chunks))
    for manifest in (before, after):
        state = next(f for f in manifest.files if f.name == STATE_FILE)
        wanted.update(
            dict.fromkeys(
                state.chunks[k] for k in _state_parts(layout, samples, _has_sent(manifest, layout))
            )
        )
    return list(wanted)


def check_bytes(layout: Layout, samples: Sequence[Sample]) -> int:
    """The bytes a check of a step in steady state (both states with a last transmission) fetches: two
    manifests (at most), the sign plane and the sampled bands' parts of two states (at most)."""
    size, part = state_size(layout, True), part_size(layout)
    parts = sum(min(part, size - k * part) for k in _state_parts(layout, samples, True))
    return 2 * manifest_limit(layout) + signs_size(layout) + 2 * parts


# -- what the sampled parts say ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class SampledState:
    """A committed state's header and its sampled bands (per sample: momentum rows, and its tiles of the last
    transmission when the state has one)."""

    step: int
    momentum: tuple[torch.Tensor, ...]  # (rows, row_width) per sample
    sent: tuple[SparseTiles, ...] | None  # (tiles, k) per sample

    @property
    def fresh(self) -> bool:
        """A fresh optimizer's state (before any step) on the sampled bands."""
        return (
            self.step == BEFORE_ANY_STEP
            and self.sent is None
            and not any(bool(m.any()) for m in self.momentum)
        )


def read_sampled(parts: CommittedParts, layout: Layout, samples: Sequence[Sample]) -> SampledState:
    """Decode the header and sampled bands of a committed state (StateError says what is wrong)."""
    has_sent = _has_sent(parts.manifest, layout)
    magic, version, sent_flag, reserved, step, digest = HEADER.unpack(
        parts.read(STATE_FILE, 0, HEADER.size)
    )
    if magic != MAGIC or version != VERSION or reserved or sent_flag != has_sent:
        raise StateError("not an optimizer state of this version")
    if digest != layout.digest:
        raise StateError("state was taken for a different parameter layout")
    spans = iter(_spans(layout, samples, has_sent)[1:])
    momentum, sent = [], []
    for s in samples:
        b, band = layout.buckets[s.bucket], s.band
        raw = np.frombuffer(parts.read(STATE_FILE, *next(spans)), dtype="<f4").astype(np.float32)
        rows = torch.from_numpy(raw).view(band.end - band.start, b.row_width)
        if not bool(torch.isfinite(rows).all()):
            raise StateError("momentum values must be finite")
        momentum.append(rows)
        if has_sent:
            idx = np.frombuffer(parts.read(STATE_FILE, *next(spans)), dtype="<u4").astype(np.int64)
            val = np.frombuffer(parts.read(STATE_FILE, *next(spans)), dtype="<f4").astype(
                np.float32
            )
            if idx.size and int(idx.max()) >= b.totalk:
                raise StateError("sent index out of range for its tile")
            sent.append(
                SparseTiles(
                    torch.from_numpy(idx).view(-1, b.topk), torch.from_numpy(val).view(-1, b.topk)
                )
            )
    return SampledState(step, tuple(momentum), tuple(sent) if has_sent else None)


def check_sign_plane(parts: CommittedParts, layout: Layout, before: SampledState,
                     samples: Sequence[Sample]) -> None:  # fmt: skip
    """StateError unless the committed sign plane holds the sampled momentum's own signs on the sampled bands:
    a trainer cannot commit one momentum and feed the replay's lookahead another there."""
    for s, rows in zip(samples, before.momentum, strict=True):
        b = layout.buckets[s.bucket]
        lo, hi = s.band.start * b.row_width, s.band.end * b.row_width
        if not torch.equal(
            _plane_signs(parts, layout, s.bucket, lo, hi), torch.sign(rows).reshape(-1)
        ):
            raise StateError("its committed sign plane disagrees with its momentum")


def _plane_signs(
    parts: CommittedParts, layout: Layout, bucket: int, lo: int, hi: int
) -> torch.Tensor:
    """The signs of values [lo, hi) of `bucket`'s flat momentum, from the sign plane (4 values a byte, each
    bucket padded to a whole byte)."""
    at = sum(-(-b.numel // 4) for b in layout.buckets[:bucket])
    first, last = lo // 4, -(-hi // 4)
    return signs_of(parts.read(SIGNS_FILE, at + first, last - first), 4 * (last - first))[
        lo - 4 * first : hi - 4 * first
    ]


def restored_momentum(parts: CommittedParts, layout: Layout, before: SampledState, samples: Sequence[Sample],
                      bucket: int, lo: int, hi: int) -> torch.Tensor:  # fmt: skip
    """Values [lo, hi) of `bucket`'s flat momentum as a replay of the step after `before` starts from: the sign
    of every value (all the lookahead reads) and the true momentum on the sampled bands (what generate folds
    into the sampled tiles). Any piece of any bucket, so one process or a member's ranks (each its rows)
    restore the same values (`check_sign_plane` first)."""
    values = _plane_signs(parts, layout, bucket, lo, hi)
    width = layout.buckets[bucket].row_width
    for s, rows in zip(samples, before.momentum, strict=True):
        start, end = max(lo, s.band.start * width), min(hi, s.band.end * width)
        if s.bucket == bucket and start < end:
            values[start - lo : end - lo] = rows.reshape(-1)[
                start - s.band.start * width : end - s.band.start * width
            ]
    return values


def restored_sent(layout: Layout, before: SampledState, samples: Sequence[Sample],
                  device: torch.device | str = "cpu") -> list[SparseTiles] | None:  # fmt: skip
    """The last transmission a replay starts from: `before`'s tiles on the sampled bands, zeros elsewhere (the
    tiles there come out meaningless and are never compared); None when `before` has none."""
    if before.sent is None:
        return None
    sent = [SparseTiles(torch.zeros(b.num_tiles, b.topk, dtype=torch.int64, device=device),
                        torch.zeros(b.num_tiles, b.topk, dtype=torch.float32, device=device))
            for b in layout.buckets]  # fmt: skip
    for s, tiles in zip(samples, before.sent, strict=True):
        sent[s.bucket].indices[s.band.tiles] = tiles.indices.to(device)
        sent[s.bucket].values[s.band.tiles] = tiles.values.to(device)
    return sent


def restore_sampled(optimizer: DistroOptimizer, parts: CommittedParts, before: SampledState,
                    samples: Sequence[Sample]) -> None:  # fmt: skip
    """Put into `optimizer` (the whole model's) what a replay of the step after `before` reads
    (`restored_momentum`, `restored_sent`); a sign plane that contradicts the sampled momentum was refused before
    (`check.open_check` runs `check_sign_plane`)."""
    layout = optimizer.layout
    for i, (b, m) in enumerate(zip(layout.buckets, optimizer.momentum, strict=True)):
        flat = m.detach().view(-1)
        for lo in range(0, b.numel, STREAM_VALUES):
            hi = min(b.numel, lo + STREAM_VALUES)
            flat[lo:hi].copy_(restored_momentum(parts, layout, before, samples, i, lo, hi))
    sent = restored_sent(layout, before, samples, optimizer.momentum[0].device)
    optimizer.load_state_dict({"layout": layout.digest, "momentum": list(optimizer.momentum),
                               "sent": None if sent is None else [(t.indices, t.values) for t in sent]})  # fmt: skip


def sampled_of(momentum: Sequence[torch.Tensor], sent: Sequence[SparseTiles] | None, layout: Layout,
               samples: Sequence[Sample], step: int) -> SampledState:  # fmt: skip
    """The sampled bands of a whole state held in memory (per bucket: its stacked momentum and last
    transmission), copied to the CPU: what a replay's state is compared on."""
    rows, tiles = [], []
    for s in samples:
        b = layout.buckets[s.bucket]
        rows.append(
            momentum[s.bucket]
            .detach()
            .reshape(-1, b.row_width)[s.band.start : s.band.end]
            .cpu()
            .clone()
        )
        if sent is not None:
            t = sent[s.bucket]
            tiles.append(
                SparseTiles(
                    t.indices[s.band.tiles].cpu().clone(), t.values[s.band.tiles].cpu().clone()
                )
            )
    return SampledState(step, tuple(rows), None if sent is None else tuple(tiles))


def sampled_fraction(layout: Layout, samples: Sequence[Sample]) -> float:
    """The share of the model's values the sample covers."""
    total = sum(b.numel for b in layout.buckets)
    covered = sum((s.band.end - s.band.start) * layout.buckets[s.bucket].row_width for s in samples)
    return covered / total if total else 0.0


__all__ = [
    "CHECK_SAMPLES",
    "SAMPLE_VALUES",
    "CommittedParts",
    "MissingPart",
    "PartsOnDisk",
    "Sample",
    "SampledState",
    "check_bytes",
    "check_sign_plane",
    "commit",
    "manifest_limit",
    "parts_to_fetch",
    "read_sampled",
    "restore_sampled",
    "restored_momentum",
    "restored_sent",
    "sample_bands",
    "sample_seed",
    "sample_values",
    "sampled_fraction",
    "sampled_of",
    "state_manifest",
]
