"""What the effects (and a checkpointer's Hub upload) use of the client: its handles, the newest Run, its
inbox. `loop.Client` is one; naming it here rather than importing it keeps effects.py free of loop.py."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from solders.keypair import Keypair
    from solders.pubkey import Pubkey

    from cohort.sdk.client import RunClient
    from cohort.sdk.models import Run

    from ..p2p import NodeKey, P2PNode
    from .events import Events
    from .exchange import Exchange
    from .options import ClientOptions
    from .replica import Replica
    from .weights import CheckpointShelf
    from .worker import ModelWorker


class ClientHost(Protocol):
    options: ClientOptions
    events: Events
    latest: Run | None  # the newest Run state seen
    chain: RunClient
    wallet: Keypair
    run_address: Pubkey
    node_key: NodeKey
    node: P2PNode
    endpoint: str
    worker: ModelWorker
    exchange: Exchange
    shelf: CheckpointShelf
    trainer_ready: asyncio.Future[Replica]

    def post(self, event: object) -> None: ...
