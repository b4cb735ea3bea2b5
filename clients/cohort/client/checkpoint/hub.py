"""Checkpoints on the Hugging Face hub: download a repo + revision (or use a local directory),
and upload a checkpointer's directory. Downloads are verified against the manifest hash like P2P.

`HF_ENDPOINT` (read at each call, passed to huggingface_hub explicitly) names another Hub-compatible server;
the tests run both directions against a local stand-in (tests/support/hub_standin.py).
"""

from __future__ import annotations

import os
import re
import shutil
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .layout import CheckpointError, verify

# files the hub adds to every repo; a checkpoint never holds them, so they are not part of it
HUB_EXTRAS = frozenset({".gitattributes", "README.md"})
_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")


def hub_endpoint(environ: Mapping[str, str] = os.environ) -> str | None:
    """The Hub to talk to: HF_ENDPOINT when set (a mirror, a stand-in), else huggingface_hub's default."""
    return environ.get("HF_ENDPOINT", "").strip().rstrip("/") or None


@dataclass(frozen=True)
class HubUpload:
    """Where a checkpointer uploads: `--hub-repo owner/name`, the token from HF_TOKEN."""

    repo: str
    token: str
    endpoint: str | None = None  # None: huggingface_hub's default

    @classmethod
    def from_options(
        cls, hub_repo: str | None, environ: Mapping[str, str] = os.environ
    ) -> HubUpload | None:
        """None without --hub-repo; a clear error for a bad repo id or a missing token."""
        if hub_repo is None:
            return None
        check_repo_id(hub_repo)
        token = environ.get("HF_TOKEN", "").strip()
        if not token:
            raise CheckpointError(f"--hub-repo {hub_repo} needs a write token in HF_TOKEN")
        return cls(hub_repo, token, hub_endpoint(environ))

    def upload(self, directory: str | Path, *, message: str) -> str:
        """Upload the checkpoint directory; returns the commit id (the revision joiners ask for).
        huggingface_hub shows a byte progress bar per weights file (stderr) while it uploads; a failure is
        one CheckpointError."""
        from huggingface_hub import HfApi
        from huggingface_hub.errors import HfHubHTTPError

        api = HfApi(token=self.token, endpoint=self.endpoint)
        try:
            api.create_repo(self.repo, exist_ok=True, private=False)
            commit = api.upload_folder(
                repo_id=self.repo, folder_path=str(directory), commit_message=message
            )
        except (HfHubHTTPError, OSError, ValueError) as e:
            raise CheckpointError(
                f"upload to hub {self.repo}: {type(e).__name__}: {e}"[:500]
            ) from None
        return commit.oid


def check_repo_id(repo: str) -> str:
    if not isinstance(repo, str) or not _REPO_ID.match(repo) or ".." in repo:
        raise CheckpointError(f"hub repo must look like owner/name, got {repo!r:.80}")
    return repo


def fetch_from_hub(
    repo: str, revision: str | None, expected_hash: bytes, dest: Path, *, token: str | None = None
) -> Path:
    """The verified checkpoint of `repo` at `revision`.

    An existing local directory given as `repo` (no revision) is verified in place and used as is;
    otherwise the snapshot is downloaded to the hub cache and its files (minus HUB_EXTRAS) copied
    to `dest`, then verified; a mismatch removes the copy and raises CheckpointError.
    """
    local = Path(repo)
    if revision is None and local.is_dir():
        verify(local, expected_hash)
        return local
    check_repo_id(repo)
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError

    try:
        cached = Path(
            snapshot_download(repo_id=repo, revision=revision, token=token, endpoint=hub_endpoint())
        )
    except (HfHubHTTPError, OSError, ValueError) as e:
        raise CheckpointError(f"hub {repo}@{revision or 'main'}: {type(e).__name__}: {e}") from None
    return copy_verified(cached, expected_hash, dest, skip=HUB_EXTRAS)


def copy_verified(source: Path, expected_hash: bytes, dest: Path, *, skip=frozenset()) -> Path:
    """Copy `source`'s files (following the hub cache's symlinks) to `dest`, atomically, verified."""
    temp = dest.with_name(f".tmp-copy-{dest.name}-{uuid.uuid4().hex[:8]}")
    temp.mkdir(parents=True)
    try:
        for path in sorted(source.rglob("*")):
            name = path.relative_to(source).as_posix()
            if name in skip or name.startswith(".cache/") or name == ".cache" or path.is_dir():
                continue
            target = temp / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path.resolve(), target)
        verify(temp, expected_hash)
        if dest.exists():
            shutil.rmtree(dest)
        os.rename(temp, dest)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    return dest
