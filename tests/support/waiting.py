"""Waiting, in tests, for something another task does a moment later: bounded in time, never a bare sleep."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def wait_until(condition: Callable[[], object], timeout: float, step: float = 0.02) -> None:
    """Return once `condition()` is true; TimeoutError after `timeout` seconds."""
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(step)
