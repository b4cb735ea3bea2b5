"""The training client: the one room that combines the chain (cohort.sdk), peers (p2p) and training
(model, data, distro). Start at `Client` (loop.py); `cohort train` is its command line (cli.py)."""

from .events import Events
from .loop import Client
from .options import ClientOptions, ClientRefused, ExitCode

__all__ = ["Client", "ClientOptions", "ClientRefused", "Events", "ExitCode", "run"]


async def run(options: ClientOptions) -> ExitCode:
    """Train in a run until it finishes or the client is stopped; returns the exit code."""
    return await Client(options).run()
