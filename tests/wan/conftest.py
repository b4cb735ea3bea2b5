"""Beds for the WAN tests: skipped (with the reason) where the machine cannot host one."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack

import pytest
from support.wan import Link, WanBed, WanUnavailable


@pytest.fixture
def make_bed() -> Iterator[Callable[..., WanBed]]:
    """make_bed(nodes, **WanBed kwargs) -> an entered bed, closed after the test (pass or fail)."""
    with ExitStack() as stack:

        def make(nodes: dict[str, Link | tuple[Link, Link]], **kwargs: object) -> WanBed:
            try:
                return stack.enter_context(WanBed(nodes, **kwargs))  # type: ignore[arg-type]
            except WanUnavailable as e:
                pytest.skip(str(e))

        yield make
