"""How clients find each other: each join transaction carries the node's address as its `endpoint`.

The chain's epoch list holds node ids, not addresses, and a fresh machine has no discovery service. So a
client writes its direct addresses (and relay, if any) into the `endpoint` argument of `join_run`; the
program checks it is printable ASCII and stores it in the wallet's Endpoint account (PDA
`["endpoint", run, wallet]`, written only by that wallet's own join, closed by its exit). Peers read every
member's account with one getMultipleAccounts per 100 members (`RunClient.endpoints`): it works on any
cluster, devnet included, costs no transaction scan, and an address is never older than the epoch it
joined for. The node id comes from the chain (bound to the wallet by the join's Ed25519 proof), never
from the endpoint text.

Endpoint text: space-separated `host:port` direct addresses, then optionally `relay=<url>`, e.g.
`127.0.0.1:40121 [::1]:40122 relay=https://relay.example`.
"""

from __future__ import annotations

from cohort.client.p2p import NodeId, PeerAddress

ENDPOINT_CAPACITY = 160  # the program's ENDPOINT_LEN


def encode_endpoint(address: PeerAddress) -> str:
    """The endpoint text of our address; the last direct addresses give way if it does not fit."""
    addrs = list(address.addrs)
    relay = [f"relay={address.relay_url}"] if address.relay_url else []
    text = " ".join(addrs + relay)
    while len(text) > ENDPOINT_CAPACITY and addrs:
        addrs.pop()
        text = " ".join(addrs + relay)
    if len(text) > ENDPOINT_CAPACITY or not text:
        raise ValueError(f"no address of ours fits in {ENDPOINT_CAPACITY} bytes: {address}")
    return text


def decode_endpoint(node_id: NodeId, text: str) -> PeerAddress:
    """The PeerAddress an endpoint text describes; ValueError says what is wrong with it."""
    if len(text) > ENDPOINT_CAPACITY or any(not 0x20 <= ord(c) <= 0x7E for c in text):
        raise ValueError(
            f"endpoint {text[:40]!r} is not printable ASCII of at most {ENDPOINT_CAPACITY} bytes"
        )
    addrs, relay = [], None
    for token in text.split():
        if token.startswith("relay="):
            url = token[len("relay=") :]
            if relay is not None or not url.startswith(("https://", "http://")):
                raise ValueError(f"endpoint {text!r}: bad relay {token!r}")
            relay = url
        else:
            addrs.append(token)
    return PeerAddress(node_id, tuple(addrs), relay)  # checks every host:port
