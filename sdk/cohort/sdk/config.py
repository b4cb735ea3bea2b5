"""Workspace settings from `Anchorfile.toml` (in the spirit of Anchor.toml), and cluster resolution.

Precedence, highest first: command-line flags, environment variables (`COHORT_CLUSTER`, `COHORT_WALLET`,
`COHORT_PROGRAM_ID`, `COHORT_ANCHORFILE`, `COHORT_WS_URL`), the Anchorfile, built-in defaults.
A cluster is a name from `[clusters]` (or a well-known one: localnet, devnet, testnet, mainnet-beta) or an
RPC URL; several URLs separated by commas (or a TOML list) are tried in order, the later ones as fallbacks.

`cohort deploy` never rewrites the Anchorfile (it is usually tracked in git): the ids it deploys go to an
untracked local file, `.cohort/programs.toml` beside the Anchorfile (or `~/.config/cohort/programs.toml`
when there is no Anchorfile), which every command reads before the Anchorfile's own [programs.<cluster>].
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from solders.pubkey import Pubkey

from .errors import ConfigError
from .wallet import DEFAULT_WALLET

ANCHORFILE = "Anchorfile.toml"
PROGRAM_NAME = "coordinator"
LOCAL_DIR = ".cohort"  # untracked state beside the Anchorfile: deployed program ids
DEPLOYMENTS_FILE = "programs.toml"
WELL_KNOWN_CLUSTERS = {
    "localnet": "http://127.0.0.1:8899",
    "devnet": "https://api.devnet.solana.com",
    "testnet": "https://api.testnet.solana.com",
    "mainnet-beta": "https://api.mainnet-beta.solana.com",
}


@dataclass(frozen=True)
class Cluster:
    """Where to send requests: `name` keys the program ids in [programs.<name>]."""

    name: str
    urls: tuple[str, ...]
    ws_url: str

    @property
    def url(self) -> str:
        return self.urls[0]


@dataclass
class Workspace:
    """The parsed Anchorfile (or the defaults when there is none)."""

    path: Path | None = None
    cluster: str = "localnet"
    wallet: Path = DEFAULT_WALLET
    clusters: dict[str, tuple[str, ...]] = field(default_factory=dict)
    programs: dict[str, dict[str, str]] = field(default_factory=dict)
    deployed: dict[str, dict[str, str]] = field(default_factory=dict)  # from the deployments file

    @property
    def root(self) -> Path:
        return self.path.parent if self.path else Path.cwd()

    @property
    def state_dir(self) -> Path:
        """Where this workspace keeps untracked state (deployed ids; outside a checkout, program keys)."""
        return self.path.parent / LOCAL_DIR if self.path else user_config_dir()

    @property
    def deployments(self) -> Path:
        return self.state_dir / DEPLOYMENTS_FILE


def user_config_dir() -> Path:
    """cohort's folder in the user's config dir ($XDG_CONFIG_HOME/cohort, default ~/.config/cohort)."""
    base = os.environ.get("XDG_CONFIG_HOME") or "~/.config"
    return Path(base).expanduser() / "cohort"


def find_anchorfile(start: Path | None = None) -> Path | None:
    """`COHORT_ANCHORFILE`, else the nearest Anchorfile.toml in this directory or a parent."""
    env = os.environ.get("COHORT_ANCHORFILE")
    if env:
        return Path(env).expanduser()
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / ANCHORFILE).is_file():
            return folder / ANCHORFILE
    return None


def _urls(value: object, where: str) -> tuple[str, ...]:
    items = value if isinstance(value, list) else str(value).split(",")
    urls = tuple(str(u).strip() for u in items if str(u).strip())
    if not urls:
        raise ConfigError(f"{where}: no URL given")
    for url in urls:
        check_url(url, where)
    return urls


def check_url(url: str, where: str = "cluster") -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{where}: {url!r} is not an http(s) URL")
    try:
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError as e:
        raise ConfigError(f"{where}: {url!r} has a bad port ({e})") from None


def _read_toml(path: Path) -> dict:
    try:
        return tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"{path}: not valid TOML ({e})") from None


def _programs(raw: dict) -> dict[str, dict[str, str]]:
    return {
        cluster: {name: str(pid) for name, pid in entries.items()}
        for cluster, entries in raw.get("programs", {}).items()
        if isinstance(entries, dict)
    }


def load_workspace(path: str | Path | None = None) -> Workspace:
    """Read an Anchorfile; `path=None` searches for one and falls back to the defaults."""
    found = Path(path).expanduser() if path else find_anchorfile()
    if found is None:
        workspace = Workspace()
    elif not found.is_file():
        raise ConfigError(f"no Anchorfile at {found}")
    else:
        raw = _read_toml(found)
        provider = raw.get("provider", {})
        clusters = {
            name: _urls(value, f"{found} [clusters].{name}")
            for name, value in raw.get("clusters", {}).items()
        }
        workspace = Workspace(
            path=found,
            cluster=str(provider.get("cluster", "localnet")),
            wallet=Path(str(provider.get("wallet", DEFAULT_WALLET))),
            clusters=clusters,
            programs=_programs(raw),
        )
    if workspace.deployments.is_file():
        workspace.deployed = _programs(_read_toml(workspace.deployments))
    return workspace


def ws_url_for(http_url: str) -> str:
    """The websocket URL beside an RPC URL, as the Solana CLI derives it: ws(s) scheme, port + 1 when explicit."""
    parts = urlsplit(http_url)
    scheme = "wss" if parts.scheme == "https" else "ws"
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host if parts.port is None else f"{host}:{parts.port + 1}"
    return urlunsplit((scheme, netloc, parts.path, parts.query, ""))


def resolve_cluster(
    workspace: Workspace, cluster: str | None = None, ws_url: str | None = None
) -> Cluster:
    """A cluster name or URL(s) → the URLs to use (None: the workspace's provider cluster)."""
    wanted = (cluster or os.environ.get("COHORT_CLUSTER") or workspace.cluster).strip()
    ws_url = ws_url or os.environ.get("COHORT_WS_URL")
    if wanted in workspace.clusters:
        name, urls = wanted, workspace.clusters[wanted]
    elif wanted in WELL_KNOWN_CLUSTERS:
        name, urls = wanted, (WELL_KNOWN_CLUSTERS[wanted],)
    elif "://" in wanted:
        urls = _urls(wanted, "--cluster")
        known = {u: n for n, us in workspace.clusters.items() for u in us}
        name = known.get(urls[0], urls[0])
    else:
        names = sorted(set(workspace.clusters) | set(WELL_KNOWN_CLUSTERS))
        raise ConfigError(
            f"unknown cluster {wanted!r}: use one of {', '.join(names)} or an RPC URL"
        )
    return Cluster(name, urls, ws_url or ws_url_for(urls[0]))


def resolve_wallet(workspace: Workspace, wallet: str | Path | None = None) -> Path:
    """Flag, `COHORT_WALLET`, or [provider] wallet (relative to the Anchorfile's folder, as in Anchor)."""
    given = wallet or os.environ.get("COHORT_WALLET")
    if given:
        return Path(given).expanduser()
    path = Path(workspace.wallet).expanduser()
    return path if path.is_absolute() else workspace.root / path


def resolve_program_id(
    workspace: Workspace, cluster: Cluster, program_id: str | None = None
) -> Pubkey:
    """The coordinator's address on this cluster: flag, `COHORT_PROGRAM_ID`, the id `cohort deploy` recorded
    in the deployments file, or the Anchorfile's [programs.<cluster>]."""
    value = program_id or os.environ.get("COHORT_PROGRAM_ID")
    for table in (workspace.deployed, workspace.programs):
        value = value or table.get(cluster.name, {}).get(PROGRAM_NAME)
    if not value:
        where = workspace.path or ANCHORFILE
        raise ConfigError(
            f"no coordinator program id for cluster {cluster.name!r} in {where}: "
            f"run `cohort deploy --cluster {cluster.name}` (or pass --program-id)"
        )
    try:
        return Pubkey.from_string(value)
    except ValueError:
        raise ConfigError(f"program id {value!r} is not a base58 address") from None


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else '"' + key.replace('"', '\\"') + '"'


def write_program_id(
    path: Path, cluster: str, program_id: Pubkey, program: str = PROGRAM_NAME
) -> None:
    """Record a deployed program id under [programs.<cluster>], keeping the file's comments and layout."""
    text = path.read_text() if path.exists() else _DEPLOYMENTS_HEADER
    header = f"[programs.{_toml_key(cluster)}]"
    line = f'{program} = "{program_id}"'
    lines = text.splitlines()
    start = next((i for i, raw in enumerate(lines) if raw.strip() == header), None)
    if start is None:
        lines += ["", header, line] if lines and lines[-1].strip() else [header, line]
    else:
        end = next(
            (i for i in range(start + 1, len(lines)) if lines[i].lstrip().startswith("[")),
            len(lines),
        )
        pattern = re.compile(rf"^\s*{re.escape(program)}\s*=")
        existing = next((i for i in range(start + 1, end) if pattern.match(lines[i])), None)
        if existing is not None:
            lines[existing] = line
        else:
            lines.insert(start + 1, line)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def record_deployment(workspace: Workspace, cluster: str, program_id: Pubkey) -> Path:
    """Remember a deployed program id in the workspace's untracked deployments file; returns its path."""
    folder = workspace.state_dir
    folder.mkdir(parents=True, exist_ok=True)
    if workspace.path is not None and not (folder / ".gitignore").exists():
        (folder / ".gitignore").write_text("# local state of cohort, never committed\n*\n")
    write_program_id(workspace.deployments, cluster, program_id)
    workspace.deployed.setdefault(cluster, {})[PROGRAM_NAME] = str(program_id)
    return workspace.deployments


_DEPLOYMENTS_HEADER = "# Program ids `cohort deploy` deployed from this machine (not for version control).\n"
