"""Peer-to-peer layer: node identity, transports (iroh, HTTP), blobs, gossip, checkpoint sharing.

Pure asyncio on top of iroh and aiohttp; it knows nothing about the chain. Start at `P2PNode`.
"""

from .allowlist import Allowlist
from .announcement import Announcement, gossip_topic
from .blob_fetch import BlobFetcher, BlobFetchError, FetchPolicy
from .blob_protocol import BlobServer
from .blob_store import BlobStore, blob_hash
from .directory import DirectoryShare
from .directory_fetch import (
    FetchProgress,
    FetchProgressCallback,
    discard,
    fetch_parts,
    log_progress,
)
from .gossip import Gossip, GossipConfig
from .http_transport import HttpTransport
from .identity import NodeId, NodeKey
from .iroh_transport import IrohConfig, IrohTransport
from .manifest import Manifest
from .node import NodeStats, P2PNode
from .transport import (
    PeerAddress,
    PeerRejected,
    PeerUnreachable,
    RemoteError,
    RequestRejected,
    Status,
    StreamBroken,
    Transport,
    TransportError,
)

__all__ = [
    "Allowlist",
    "Announcement",
    "BlobFetchError",
    "BlobFetcher",
    "BlobServer",
    "BlobStore",
    "DirectoryShare",
    "FetchPolicy",
    "FetchProgress",
    "FetchProgressCallback",
    "Gossip",
    "GossipConfig",
    "HttpTransport",
    "IrohConfig",
    "IrohTransport",
    "Manifest",
    "NodeId",
    "NodeKey",
    "NodeStats",
    "P2PNode",
    "PeerAddress",
    "PeerRejected",
    "PeerUnreachable",
    "RemoteError",
    "RequestRejected",
    "Status",
    "StreamBroken",
    "Transport",
    "TransportError",
    "blob_hash",
    "discard",
    "fetch_parts",
    "gossip_topic",
    "log_progress",
]
