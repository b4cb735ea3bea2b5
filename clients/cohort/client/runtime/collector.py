"""Python's cyclic garbage collector, run on the event loop's thread at points the loop chooses instead of
wherever an allocation trips it.

iroh's Python objects free their Rust side in `__del__`. A collection that an allocation started on one of
Rust's own threads, inside a callback Rust was making (an async call's continuation), ran a stream's
`__del__` there, whose free blocked, while the loop's thread waited in a call into the same connection: the
client froze for good, answered nothing, and was dropped (its stacks, written on SIGUSR1, showed exactly
that). With automatic collection off, a collection only ever starts here, between two of the loop's
callbacks, when no call into Rust is in flight on this thread. Objects without cycles are still freed at
once by reference counting, as always."""

from __future__ import annotations

import asyncio
import gc

COLLECT_EVERY = 0.25  # seconds between looks at the allocation counts


def due_generation(counts: tuple[int, int, int], thresholds: tuple[int, int, int]) -> int | None:
    """The oldest generation whose count passed its threshold (what CPython's automatic collection would
    collect), or None."""
    for generation in (2, 1, 0):
        if thresholds[generation] and counts[generation] > thresholds[generation]:
            return generation
    return None


async def collect_on_the_loop(every: float = COLLECT_EVERY) -> None:
    """Turn automatic collection off and collect here instead, until cancelled (then it is on again)."""
    gc.disable()
    try:
        while True:
            await asyncio.sleep(every)
            generation = due_generation(gc.get_count(), gc.get_threshold())
            if generation is not None:
                gc.collect(generation)
    finally:
        gc.enable()
