"""Guard for the iroh send-path fix: fails if the pinned bindings change under it."""

from __future__ import annotations

import importlib.metadata

from iroh import iroh_ffi

import cohort.client.p2p  # noqa: F401  (importing the package applies the fix)
from cohort.client.p2p import iroh_fix


def test_fix_is_applied_to_the_pinned_version():
    assert importlib.metadata.version("iroh") == iroh_fix.PATCHED_VERSION, (
        "iroh was upgraded: check whether its bindings still copy bytes one at a time "
        "(uniffi < 0.32) and update or drop iroh_fix"
    )
    assert iroh_fix.APPLIED
    assert iroh_fix.send_path_fixed()


def test_bytes_reach_rust_through_the_one_copy_path():
    calls = []
    fixed = iroh_ffi._UniffiRustBufferBuilder.write

    def counting(self, value):
        calls.append(len(value))
        return fixed(self, value)

    iroh_ffi._UniffiRustBufferBuilder.write = counting
    try:
        payload = bytes(range(256)) * 4096 + b"tail"
        assert iroh_fix.lower_bytes(payload) == payload
    finally:
        iroh_ffi._UniffiRustBufferBuilder.write = fixed
    assert calls == [len(payload)]  # the whole argument in one call, not per byte


def test_fixed_write_keeps_the_contract():
    for value in (b"", b"x", bytearray(b"abc" * 1000), memoryview(b"0123456789")[2:7]):
        assert iroh_fix.lower_bytes(value) == bytes(value)
