"""Where a joiner gets the run's weights, always checked against the manifest hash on chain.

- FromSeed: the first epoch (or a `Dummy` checkpoint): nothing to fetch, the weights derive
  from the run seed.
- FromPeers: the manifest and its parts from the clients that hold the checkpoint, in parallel
  (`p2p.fetch_parts`); each part is verified on arrival, a peer serving other bytes is asked last
  for the next ones, and a fetch that fails keeps its verified parts for the next try to resume.
- FromHub: a Hugging Face repo + revision, or a local directory path.
- FromPeersThenHub: peers first, the hub when no peer delivers.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path

from ..p2p import (
    BlobFetchError,
    FetchProgressCallback,
    Manifest,
    P2PNode,
    PeerAddress,
    discard,
    fetch_parts,
    log_progress,
)
from .hub import fetch_from_hub
from .layout import CheckpointError, verify

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FromSeed:
    pass


@dataclass(frozen=True)
class FromPeers:
    node: P2PNode
    providers: tuple[PeerAddress, ...]


@dataclass(frozen=True)
class FromHub:
    repo: str  # "owner/name", or a local directory
    revision: str | None = None
    token: str | None = None


@dataclass(frozen=True)
class FromPeersThenHub:
    peers: FromPeers
    hub: FromHub


CheckpointSource = FromSeed | FromPeers | FromHub | FromPeersThenHub


class CheckpointUnavailable(CheckpointError):
    """No source delivered the checkpoint with the expected hash; nothing was kept."""


async def fetch_checkpoint(
    source: CheckpointSource,
    manifest_hash: bytes,
    dest: str | Path,
    *,
    progress: FetchProgressCallback | None = None,
) -> Path | None:
    """The directory of the verified checkpoint (`dest`, or the local directory a FromHub names),
    or None for FromSeed. A `dest` left by an earlier run is reused if it verifies; a peer fetch
    left unfinished is resumed. `progress` sees a peer fetch after every part (by default a log
    line at every tenth)."""
    if isinstance(source, FromSeed):
        return None
    if len(manifest_hash) != 32:
        raise ValueError("manifest_hash is a 32-byte sha256")
    dest = Path(dest)
    peers = source if isinstance(source, FromPeers) else getattr(source, "peers", None)
    if dest.is_dir():
        try:
            manifest = await asyncio.to_thread(verify, dest, manifest_hash)
            return await _serve(peers, dest, manifest)
        except CheckpointError:
            shutil.rmtree(dest)
    if isinstance(source, FromHub):
        return (await _from_hub(source, manifest_hash, dest))[0]
    try:
        path, manifest = await _from_peers(peers, manifest_hash, dest, progress or log_progress())
    except CheckpointUnavailable as e:
        if isinstance(source, FromPeers):
            raise
        log.warning("%s; trying the hub", e)
        path, manifest = await _from_hub(source.hub, manifest_hash, dest)
        discard(_work_dir(dest))  # the peers' parts are not needed any more
    return await _serve(peers, path, manifest)


async def _serve(peers: FromPeers | None, path: Path, manifest: Manifest) -> Path:
    """Serve a verified checkpoint to later joiners (when we have a P2P node)."""
    if peers is not None:
        await peers.node.share_directory(path, manifest)
    return path


def _work_dir(dest: Path) -> Path:
    return dest.with_name(f".tmp-fetch-{dest.name}")


async def _from_peers(
    source: FromPeers, manifest_hash: bytes, dest: Path, progress: FetchProgressCallback
) -> tuple[Path, Manifest]:
    if not source.providers:
        raise CheckpointUnavailable("no peer holds the checkpoint")
    work = _work_dir(dest)
    try:
        manifest = await fetch_parts(
            source.node.fetcher, manifest_hash, list(source.providers), work, progress=progress
        )
        # every part was checked against the manifest the hash vouches for: what is left to check
        # is that the directory holds those files and nothing else (no second read of every byte)
        names = sorted(p.relative_to(work).as_posix() for p in work.rglob("*") if p.is_file())
        if names != [f.name for f in manifest.files]:
            raise CheckpointError(f"{work}: holds {names[:5]}, not the manifest's files")
        work.rename(dest)
    except BlobFetchError as e:  # a holder may come back, or another one: keep the verified parts
        raise CheckpointUnavailable(
            f"checkpoint {manifest_hash.hex()[:16]} from {len(source.providers)} peers: {e}"
        ) from None
    except (CheckpointError, ValueError) as e:
        discard(work)
        raise CheckpointUnavailable(
            f"checkpoint {manifest_hash.hex()[:16]} from {len(source.providers)} peers: {e}"
        ) from None
    return dest, manifest


async def _from_hub(source: FromHub, manifest_hash: bytes, dest: Path) -> tuple[Path, Manifest]:
    try:
        path = await asyncio.to_thread(
            fetch_from_hub, source.repo, source.revision, manifest_hash, dest, token=source.token
        )
        # verified by fetch_from_hub; the manifest again for serving (a local read)
        return path, await asyncio.to_thread(verify, path, manifest_hash)
    except CheckpointError as e:
        raise CheckpointUnavailable(str(e)) from None
