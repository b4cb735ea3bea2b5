"""Fix for the send path of the iroh 1.2.0 Python bindings, applied on import.

The generated bindings copy every `bytes` argument into a Rust buffer one byte at a time in Python
(`_UniffiRustBufferBuilder.write`), which caps sending at ~9 MB/s. Upstream fixed the template in
uniffi 0.32 (mozilla/uniffi-rs#2824; n0-computer/iroh-ffi#229), but iroh 1.2.0 still ships the loop.
We replace that one method with a single `memmove`. The patch only applies to the pinned version:
on any other version it is skipped, and `send_path_fixed()` (checked by a test) turns false so an
upgrade is re-examined rather than silently slow or silently broken.
"""

from __future__ import annotations

import ctypes
import importlib.metadata

from iroh import iroh_ffi

PATCHED_VERSION = "1.2.0"

_Builder = iroh_ffi._UniffiRustBufferBuilder
_original_write = _Builder.write


def _memmove_write(self, value) -> None:
    """Append `value` to the Rust buffer in one copy (same contract as the per-byte original)."""
    data = value if isinstance(value, bytes) else bytes(value)
    n = len(data)
    with self._reserve(n):
        ctypes.memmove(ctypes.addressof(self.rbuf.data.contents) + self.rbuf.len, data, n)


def _apply() -> bool:
    try:
        version = importlib.metadata.version("iroh")
    except importlib.metadata.PackageNotFoundError:
        return False
    if version != PATCHED_VERSION:
        return False
    _Builder.write = _memmove_write
    return True


def send_path_fixed() -> bool:
    """True while bytes sent into iroh go through the one-copy path."""
    return _Builder.write is _memmove_write


def lower_bytes(value: bytes) -> bytes:
    """Round-trip `value` through the bindings' bytes converter (what `write_all` does to its argument)."""
    rbuf = iroh_ffi._UniffiFfiConverterBytes.lower(value)
    return iroh_ffi._UniffiFfiConverterBytes.lift(rbuf)


APPLIED = _apply()
