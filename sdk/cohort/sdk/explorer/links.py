"""Links the pages may show. Strings written by a run's creator become links only when they are http(s)
URLs; transactions link to the Solana Explorer on the right cluster (a custom URL for a localnet)."""

from __future__ import annotations

from urllib.parse import quote, urlsplit

_KNOWN_CLUSTERS = {
    "api.devnet.solana.com": "devnet",
    "api.testnet.solana.com": "testnet",
    "api.mainnet-beta.solana.com": "",
}
SOLANA_EXPLORER = "https://explorer.solana.com"


def safe_http_url(text: str | None) -> str | None:
    """`text` if it is an absolute http(s) URL with a host and no control characters or spaces, else None."""
    if not text or len(text) > 2048 or any(ord(c) < 33 or c in "\"'<>`\\" for c in text):
        return None
    try:
        parts = urlsplit(text)
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        return None
    return text


def cluster_query(cluster_url: str) -> str:
    """The Solana Explorer's query string for the cluster behind `cluster_url`."""
    host = urlsplit(cluster_url).hostname or ""
    if host in _KNOWN_CLUSTERS:
        name = _KNOWN_CLUSTERS[host]
        return f"?cluster={name}" if name else ""
    return f"?cluster=custom&customUrl={quote(cluster_url, safe='')}"


def transaction_url(signature: str, cluster_url: str) -> str:
    return f"{SOLANA_EXPLORER}/tx/{quote(signature, safe='')}{cluster_query(cluster_url)}"


def account_url(address: str, cluster_url: str) -> str:
    return f"{SOLANA_EXPLORER}/address/{quote(address, safe='')}{cluster_query(cluster_url)}"


def checkpoint_url(kind: str, repo: str, revision: str) -> str | None:
    """Where a checkpoint can be browsed: a Hugging Face repo for Hub checkpoints, or the repo string
    itself when it is an http(s) URL."""
    direct = safe_http_url(repo)
    if direct:
        return direct
    if kind in ("Hub", "P2P") and repo and all(c.isalnum() or c in "-_./" for c in repo):
        if ".." in repo or repo.startswith("/"):
            return None
        tail = f"/tree/{quote(revision, safe='')}" if revision else ""
        return f"https://huggingface.co/{quote(repo, safe='/')}{tail}"
    return None
