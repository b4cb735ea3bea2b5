"""Run a standalone P2P node that serves blobs and directories until stopped.

    python -m cohort.client.p2p serve --transport iroh --allow <node id hex> \
        --blob weights.bin --share-dir checkpoint/ [--random-blob 64:7] [--key-file node.key]

Prints one JSON line once it listens: {"node_id", "addrs", "blobs", "manifests"}. It stops on
SIGTERM/SIGINT, and with `--stdin-lifeline` when its standard input closes (so it never outlives
the process that started it with a pipe). `--random-blob MB:SEED` serves MB mebibytes of seeded pseudo-random bytes, the same
bytes as `seeded_bytes(MB << 20, SEED)`; tests and benchmarks use it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import signal
import sys
from pathlib import Path

from .allowlist import Allowlist
from .blob_protocol import BLOB_PROTOCOL, BlobServer
from .blob_store import BlobStore
from .directory import DirectoryShare
from .http_transport import HttpTransport
from .identity import NodeId, NodeKey
from .iroh_transport import IrohConfig, IrohTransport
from .transport import PeerAddress, RemoteError, TransportError


def seeded_bytes(size: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(size)


def _random_blob(spec: str) -> tuple[int, int]:
    try:
        mb, seed = spec.split(":")
        return int(mb), int(seed)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected MB:SEED, got {spec!r}") from None


def _peer_address(spec: str) -> PeerAddress:
    node, sep, addr = spec.partition("@")
    try:
        if not sep or not addr:
            raise ValueError("no address")
        return PeerAddress(NodeId.from_hex(node), (addr,))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected NODE_ID@HOST:PORT, got {spec!r}") from None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m cohort.client.p2p", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve blobs and directories to allowed nodes")
    serve.add_argument("--transport", choices=("iroh", "http"), default="iroh")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=0)
    serve.add_argument("--key-file", type=Path, help="node key file (default: a fresh key)")
    serve.add_argument(
        "--allow", action="append", default=[], metavar="NODE_ID", help="node id allowed to connect"
    )
    serve.add_argument(
        "--blob", action="append", default=[], type=Path, help="file to serve as a blob"
    )
    serve.add_argument(
        "--random-blob", action="append", default=[], type=_random_blob, metavar="MB:SEED"
    )
    serve.add_argument(
        "--share-dir", action="append", default=[], type=Path, help="directory to share"
    )
    serve.add_argument("--relay", action="append", default=[], metavar="URL", help="iroh relay URL")
    serve.add_argument(
        "--dial",
        action="append",
        default=[],
        type=_peer_address,
        metavar="NODE_ID@HOST:PORT",
        help="once started, ask this node for a blob (any answer will do), so it has a connection from us",
    )
    serve.add_argument(
        "--stdin-lifeline", action="store_true", help="stop when standard input closes"
    )
    return parser


async def serve(args: argparse.Namespace) -> None:
    key = NodeKey.from_file(args.key_file) if args.key_file else NodeKey.generate()
    allowlist = Allowlist(NodeId.from_hex(h) for h in args.allow)
    if args.transport == "iroh":
        config = IrohConfig(bind_host=args.host, port=args.port, relay_urls=tuple(args.relay))
        transport = IrohTransport(key, allowlist, config)
    else:
        transport = HttpTransport(key, allowlist, host=args.host, port=args.port)
    store = BlobStore()
    blobs = [store.put(path.read_bytes(), 0) for path in args.blob]
    blobs += [store.put(seeded_bytes(mb << 20, seed), 0) for mb, seed in args.random_blob]
    shares = [DirectoryShare.scan(d) for d in args.share_dir]
    BlobServer([store, *shares]).register(transport)

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if args.stdin_lifeline:
        await loop.connect_read_pipe(lambda: _EofProtocol(stop), sys.stdin)
    async with transport:
        address = transport.address
        print(
            json.dumps(
                {
                    "node_id": address.node_id.hex(),
                    "addrs": list(address.addrs),
                    "blobs": [b.hex() for b in blobs],
                    "manifests": [s.manifest_hash.hex() for s in shares],
                }
            ),
            flush=True,
        )
        for peer in args.dial:  # after the line above: whoever started us may be waiting for it
            try:
                async with transport.request(peer, BLOB_PROTOCOL, bytes(32)) as reply:
                    await reply.read()
            except RemoteError:
                pass  # an answer refusing the request is all we asked for
            except TransportError as e:
                print(f"cannot reach {peer.node_id!r}: {e}", file=sys.stderr, flush=True)
        await stop.wait()


class _EofProtocol(asyncio.Protocol):
    def __init__(self, stop: asyncio.Event) -> None:
        self._stop = stop

    def connection_lost(self, exc) -> None:
        self._stop.set()


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    try:
        asyncio.run(serve(args))
    except (OSError, ValueError) as e:
        sys.exit(f"error: {e}")


if __name__ == "__main__":
    main()
