"""A P2P node: one transport with the blob, gossip and directory protocols on it.

This is what the training client holds. Each epoch it calls `set_clients` with the run's client
list (node ids and addresses from the chain); that updates the allowlist and the gossip overlay in
place.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from .allowlist import Allowlist
from .announcement import Announcement, gossip_topic
from .blob_fetch import BlobFetcher, FetchPolicy
from .blob_protocol import BlobServer
from .blob_store import BlobStore
from .directory import DirectoryShare
from .directory_fetch import FetchProgressCallback, fetch_parts, journal_path
from .gossip import Gossip, GossipConfig, OnMessage
from .http_transport import HttpTransport
from .identity import NodeId, NodeKey
from .iroh_transport import IrohConfig, IrohTransport
from .manifest import Manifest
from .transport import PeerAddress, Transport

# gossip counters that say why a message may not have arrived (what it refused or failed to pass on)
GOSSIP_TROUBLE = (
    "rejected",
    "stale",
    "future",
    "over_quota",
    "push_failures",
    "dropped_backlog",
    "silent_suspected",
)


@dataclass(frozen=True)
class NodeStats:
    """A node's counters so far, as a client reports them."""

    sent: int  # bytes, every protocol (see `traffic`)
    received: int
    uploaded: (
        int  # blob bytes served plus request bytes sent (gossip pushes and repairs not counted)
    )
    requests: int  # sent and served: requests, not bytes, are what a peer's CPU pays for
    dials: int
    gossip_trouble: dict[str, int]  # the GOSSIP_TROUBLE counters that are not zero


class P2PNode:
    def __init__(
        self,
        transport: Transport,
        run_id: str | bytes,
        *,
        on_message: OnMessage | None = None,
        gossip: GossipConfig | None = None,
        fetch: FetchPolicy | None = None,
    ) -> None:
        self.transport = transport
        self.store = BlobStore()
        self.blob_server = BlobServer([self.store])
        self.blob_server.register(transport)
        self.fetcher = BlobFetcher(transport, self.store, fetch)
        self.gossip = Gossip(transport, gossip_topic(run_id), on_message, gossip)

    @classmethod
    def iroh(
        cls, key: NodeKey, run_id: str | bytes, config: IrohConfig | None = None, **kwargs
    ) -> P2PNode:
        return cls(IrohTransport(key, Allowlist(), config), run_id, **kwargs)

    @classmethod
    def http(
        cls, key: NodeKey, run_id: str | bytes, *, host: str = "127.0.0.1", port: int = 0, **kwargs
    ) -> P2PNode:
        return cls(HttpTransport(key, Allowlist(), host=host, port=port), run_id, **kwargs)

    @property
    def address(self) -> PeerAddress:
        return self.transport.address

    def traffic(self) -> tuple[int, int]:
        """(bytes sent, bytes received) over every protocol so far: requests and blobs served, gossip
        pushes and repairs, blobs fetched."""
        g = self.gossip.stats
        sent = (
            self.transport.stats.request_bytes_sent
            + self.blob_server.bytes_served
            + g.repair_bytes_sent
        )
        received = self.fetcher.bytes_fetched + g.push_bytes_received + g.repair_bytes_received
        return sent, received

    def stats(self) -> NodeStats:
        sent, received = self.traffic()
        t, g = self.transport.stats, self.gossip.stats
        return NodeStats(
            sent=sent,
            received=received,
            uploaded=self.blob_server.bytes_served + t.request_bytes_sent,
            requests=t.requests_sent + t.requests_served,
            dials=t.dials,
            gossip_trouble={k: getattr(g, k) for k in GOSSIP_TROUBLE if getattr(g, k)},
        )

    async def start(self) -> None:
        await self.transport.start()
        await self.gossip.start()

    async def close(self) -> None:
        await self.gossip.close()
        await self.fetcher.close()
        await self.transport.close()

    async def __aenter__(self) -> P2PNode:
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    def set_clients(self, peers: Iterable[PeerAddress], overlay_key: bytes | None = None) -> None:
        """The run's current client list: who may connect, and the gossip overlay.

        `overlay_key` keys the overlay's rings with a value unknown when members joined (the epoch's
        first round seed, e.g. as 8 little-endian bytes); every member must pass the same one.
        """
        peers = list(peers)
        self.gossip.set_members(peers, overlay_key)  # first: it checks the key
        self.transport.allowlist.replace(
            (p.node_id for p in peers), (a for p in peers for a in p.addrs)
        )

    def advance_round(self, round: int, keep_rounds: int = 2) -> None:
        """Start `round`: forget blobs older than `round - keep_rounds` and old announcements."""
        self.store.gc(round - keep_rounds)
        self.gossip.advance_round(round)

    # blobs
    def add_blob(self, data: bytes, round: int) -> bytes:
        return self.store.put(data, round)

    def blob(self, blob: bytes) -> bytes | None:
        """A blob we hold (made here or fetched and verified), or None."""
        return self.store.get(blob)

    def keep_directory(self, root: Path, manifest: Manifest, round: int) -> bytes:
        """Serve a directory's parts from disk (e.g. a trainer's committed states) until `round` is collected;
        returns its manifest hash."""
        return self.store.put_directory(root, manifest, round)

    def release_directory(self, manifest_hash: bytes) -> None:
        """Stop serving a directory kept by `keep_directory` at the next `collect` (see BlobStore)."""
        self.store.release_directory(manifest_hash)

    def collect(self, before_round: int) -> int:
        """Forget the blobs kept for rounds before `before_round`; returns how many went."""
        return self.store.gc(before_round)

    def copies_served(self, blob: bytes) -> int:
        """Copies of `blob` delivered in full so far (recent blobs only)."""
        return self.blob_server.served.get(blob, 0)

    def providers_for(self, announcer: NodeId) -> list[PeerAddress]:
        """Where to fetch a blob that `announcer` announced: the announcer first, then our gossip
        neighbours in random order (they heard the announcement first and fetch it too; a peer
        that does not hold it yet answers NOT_FOUND at once)."""
        first = self.gossip.members.get(announcer)
        others = [p for p in self.gossip.neighbours() if p.node_id != announcer]
        random.shuffle(others)
        return ([first] if first is not None else []) + others

    async def fetch_blob(
        self, blob: bytes, providers: Sequence[PeerAddress], round: int | None = None, **kwargs
    ) -> bytes:
        """The verified bytes of `blob` from `providers`, kept for `round` when one is given."""
        return await self.fetcher.fetch(blob, providers, round=round, **kwargs)

    # gossip
    async def announce(self, round: int, payload: bytes) -> Announcement:
        return await self.gossip.publish(round, payload)

    # checkpoints
    async def share_directory(self, root: str | Path, manifest: Manifest | None = None) -> bytes:
        """Serve a checkpoint directory; returns its manifest hash (what goes on chain).

        Without a manifest the directory is hashed first (in a worker thread: it reads every byte).
        Directories deleted since (pruned checkpoints) stop being served; one shared again replaces its
        old share.
        """
        if manifest is None:
            share = await asyncio.to_thread(DirectoryShare.scan, root)
        else:
            share = DirectoryShare(root, manifest)
        sources = (
            self.blob_server.sources
        )  # pruned checkpoints leave; the list does not grow per epoch
        sources[:] = [
            s
            for s in sources
            if not (isinstance(s, DirectoryShare) and (s.gone or s.root == share.root))
        ]
        sources.append(share)
        return share.manifest_hash

    async def download_directory(
        self,
        manifest_hash: bytes,
        providers: Sequence[PeerAddress],
        dest: str | Path,
        *,
        progress: FetchProgressCallback | None = None,
        share: bool = True,
    ) -> Manifest:
        """Download a shared directory into `dest` (new, empty, or what an interrupted download of it
        left) from the peers that hold it, each part checked on arrival; by default serve it too."""
        dest = Path(dest)
        if (
            dest.exists()
            and (not dest.is_dir() or any(dest.iterdir()))
            and not journal_path(dest).exists()
        ):
            raise FileExistsError(
                f"{dest} exists and is not an empty directory"
            )  # never wipe a stranger's files
        manifest = await fetch_parts(
            self.fetcher, manifest_hash, providers, dest, progress=progress
        )
        if share:
            await self.share_directory(dest, manifest)
        return manifest
