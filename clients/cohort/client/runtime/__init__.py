"""The training client: the one room that combines the chain (cohort.sdk), peers (p2p) and training
(model, data, distro). Start at `Client` (loop.py); `cohort train` is its command line (cli.py).

`Client` and `Events` load on first use (PEP 562): the command line imports this package to print its help
and to check its options, and neither should pay for importing torch."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_names
from .options import ClientOptions, ClientRefused, ExitCode

if TYPE_CHECKING:
    from .events import Events
    from .loop import Client

__all__ = ["Client", "ClientOptions", "ClientRefused", "Events", "ExitCode", "run"]

_LAZY = {"Client": ".loop", "Events": ".events"}


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())


async def run(options: ClientOptions) -> ExitCode:
    """Train in a run until it finishes or the client is stopped; returns the exit code."""
    from .loop import Client

    return await Client(options).run()
