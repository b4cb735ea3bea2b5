"""A WAN test bed: nodes in network namespaces behind emulated links (delay, jitter, loss, rate,
bottleneck buffer), joined by a user-space router over TUN devices. Stdlib only; Linux; root.
See README.md in this folder."""

from .bed import HOST, WanBed, WanStats
from .link import Link, LinkStats
from .netns import WanUnavailable, check_available, cleanup_stale
from .process import NodeProcess

__all__ = [
    "HOST",
    "Link",
    "LinkStats",
    "NodeProcess",
    "WanBed",
    "WanStats",
    "WanUnavailable",
    "check_available",
    "cleanup_stale",
]
