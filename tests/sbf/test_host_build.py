"""The same C compiled for the host (ctypes) and run on chain must give the same results."""

from __future__ import annotations

import ctypes
import struct

import pytest
from solders.instruction import Instruction

SHUFFLE = 7


@pytest.fixture(scope="module")
def host_lib(probe):
    lib = ctypes.CDLL(str(probe.host_lib_path))
    lib.probe_shuffle.argtypes = [ctypes.c_uint64, ctypes.POINTER(ctypes.c_uint8), ctypes.c_uint64]
    lib.probe_shuffle.restype = None
    lib.probe_splitmix64.argtypes = [ctypes.POINTER(ctypes.c_uint64)]
    lib.probe_splitmix64.restype = ctypes.c_uint64
    return lib


def host_shuffle(lib, seed: int, n: int) -> list[int]:
    out = (ctypes.c_uint8 * max(n, 1))()
    lib.probe_shuffle(seed, out, n)
    return list(out[:n])


def reference_splitmix64(state: int) -> tuple[int, int]:
    mask = 2**64 - 1
    state = (state + 0x9E3779B97F4A7C15) & mask
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
    return z ^ (z >> 31), state


def test_host_generator_matches_reference(host_lib):
    state = ctypes.c_uint64(1234567)
    expected_state = 1234567
    for _ in range(100):
        value, expected_state = reference_splitmix64(expected_state)
        assert host_lib.probe_splitmix64(ctypes.byref(state)) == value
        assert state.value == expected_state


@pytest.mark.parametrize(
    "seed,n", [(0, 0), (0, 1), (1, 2), (42, 200), (2**64 - 1, 255), (0xC0FFEE, 97)]
)
def test_host_and_chain_agree(chain, probe_id, host_lib, seed, n):
    result = chain.ok([Instruction(probe_id, bytes([SHUFFLE]) + struct.pack("<QB", seed, n), [])])
    on_chain = list(bytes(result.return_data().data))
    assert on_chain == host_shuffle(host_lib, seed, n)
    assert sorted(on_chain) == list(range(n))
