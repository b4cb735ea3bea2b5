"""Workspace settings from `Anchorfile.toml` (in the spirit of Anchor.toml), and cluster resolution.

Precedence, highest first: command-line flags, environment variables (`COHORT_CLUSTER`, `COHORT_WALLET`,
`COHORT_PROGRAM_ID`, `COHORT_ANCHORFILE`, `COHORT_WS_URL`), the Anchorfile, the Solana CLI's config file
(`~/.config/solana/cli/config.yml`: `json_rpc_url`, `websocket_url`, `keypair_path`, as `solana config set`
writes them), built-in defaults (localnet, ~/.config/solana/id.json).
A cluster is a name from `[clusters]` (or a well-known one: localnet, devnet, testnet, mainnet-beta, also by
the Solana CLI's short names: l/localhost, d, t, m/mainnet) or an RPC URL; several URLs separated by commas
(or a TOML list) are tried in order, the later ones as fallbacks.

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
PROGRAM_NAME = "coordinator"  # the program a command means when it names none
LOCAL_DIR = ".cohort"  # untracked state beside the Anchorfile: deployed program ids
DEPLOYMENTS_FILE = "programs.toml"
WELL_KNOWN_CLUSTERS = {
    "localnet": "http://127.0.0.1:8899",
    "devnet": "https://api.devnet.solana.com",
    "testnet": "https://api.testnet.solana.com",
    "mainnet-beta": "https://api.mainnet-beta.solana.com",
}
# the Solana CLI's monikers (`solana -u l|d|t|m`), and `mainnet` for mainnet-beta
CLUSTER_ALIASES = {
    "l": "localnet",
    "localhost": "localnet",
    "d": "devnet",
    "t": "testnet",
    "m": "mainnet-beta",
    "mainnet": "mainnet-beta",
}
# the URLs of the well-known clusters as people write them (localhost for the Solana CLI's own localnet)
_WELL_KNOWN_URLS = {url: name for name, url in WELL_KNOWN_CLUSTERS.items()} | {
    "http://localhost:8899": "localnet"
}
SOLANA_CLI_CONFIG = Path("~/.config/solana/cli/config.yml")  # where `solana config set` writes


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
    cluster: str | None = None  # [provider] cluster; None: not set there
    wallet: Path | None = None  # [provider] wallet; None: not set there
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
        cluster, wallet = provider.get("cluster"), provider.get("wallet")
        workspace = Workspace(
            path=found,
            cluster=None if cluster is None else str(cluster),
            wallet=None if wallet is None else Path(str(wallet)),
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


@dataclass(frozen=True)
class SolanaCliConfig:
    """What cohort reads from the Solana CLI's config file (`solana config set --url/--keypair`)."""

    path: Path
    json_rpc_url: str | None = None
    websocket_url: str | None = None
    keypair_path: Path | None = None


def _yaml_scalar(text: str) -> str:
    """A plain or quoted YAML scalar, as serde_yaml (the Solana CLI) writes them."""
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] == "'":
        return text[1:-1].replace("''", "'")
    if len(text) >= 2 and text[0] == text[-1] == '"':
        return text[1:-1].replace('\\"', '"').replace("\\\\", "\\")
    return text.split(" #", 1)[0].strip()


def load_solana_config(path: str | Path | None = None) -> SolanaCliConfig | None:
    """The Solana CLI's config (default ~/.config/solana/cli/config.yml); None when there is none.

    Only its top-level `key: value` lines matter here, so this reads them without a YAML library."""
    path = Path(path or SOLANA_CLI_CONFIG).expanduser()
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read the Solana CLI config {path}: {e}") from None
    values: dict[str, str] = {}
    for line in text.splitlines():
        if not line or line[0] in " \t#-" or ":" not in line:
            continue  # indented (address_labels), comments, the document marker
        key, _, value = line.partition(":")
        values[key.strip()] = _yaml_scalar(value)
    url = values.get("json_rpc_url") or None
    if url is not None:
        check_url(url, f"{path} json_rpc_url")
    keypair = values.get("keypair_path")
    return SolanaCliConfig(
        path, url, values.get("websocket_url") or None, Path(keypair) if keypair else None
    )


def _cluster_name(urls: tuple[str, ...], workspace: Workspace) -> str:
    """The name that keys a URL's program ids: its [clusters] name, a well-known cluster's, else the URL."""
    known = {u: n for n, us in workspace.clusters.items() for u in us}
    first = urls[0].rstrip("/")
    return known.get(urls[0]) or known.get(first) or _WELL_KNOWN_URLS.get(first, urls[0])


def resolve_cluster(
    workspace: Workspace, cluster: str | None = None, ws_url: str | None = None
) -> Cluster:
    """A cluster name or URL(s) → the URLs to use. None: `COHORT_CLUSTER`, the Anchorfile's [provider]
    cluster, the Solana CLI config's json_rpc_url, else localnet."""
    wanted = cluster or os.environ.get("COHORT_CLUSTER") or workspace.cluster
    ws_url = ws_url or os.environ.get("COHORT_WS_URL")
    if not wanted:
        solana = load_solana_config()
        if solana is not None and solana.json_rpc_url:
            urls = (solana.json_rpc_url,)
            return Cluster(_cluster_name(urls, workspace), urls,
                           ws_url or solana.websocket_url or ws_url_for(urls[0]))  # fmt: skip
        wanted = "localnet"
    wanted = wanted.strip()
    if wanted not in workspace.clusters:
        wanted = CLUSTER_ALIASES.get(wanted, wanted)
    if wanted in workspace.clusters:
        name, urls = wanted, workspace.clusters[wanted]
    elif wanted in WELL_KNOWN_CLUSTERS:
        name, urls = wanted, (WELL_KNOWN_CLUSTERS[wanted],)
    elif "://" in wanted:
        urls = _urls(wanted, "--cluster")
        name = _cluster_name(urls, workspace)
    else:
        names = sorted(set(workspace.clusters) | set(WELL_KNOWN_CLUSTERS))
        raise ConfigError(
            f"unknown cluster {wanted!r}: use one of {', '.join(names)} (or l, d, t, m), or an RPC URL"
        )
    return Cluster(name, urls, ws_url or ws_url_for(urls[0]))


def resolve_wallet(workspace: Workspace, wallet: str | Path | None = None) -> Path:
    """Flag, `COHORT_WALLET`, [provider] wallet (relative to the Anchorfile's folder, as in Anchor), the
    Solana CLI config's keypair_path, else ~/.config/solana/id.json."""
    given = wallet or os.environ.get("COHORT_WALLET")
    if given:
        return Path(given).expanduser()
    if workspace.wallet is not None:
        path = Path(workspace.wallet).expanduser()
        return path if path.is_absolute() else workspace.root / path
    solana = load_solana_config()
    if solana is not None and solana.keypair_path is not None:
        return solana.keypair_path.expanduser()
    return DEFAULT_WALLET.expanduser()


def resolve_program_id(
    workspace: Workspace,
    cluster: Cluster,
    program_id: str | None = None,
    program: str = PROGRAM_NAME,
) -> Pubkey:
    """A program's address on this cluster (the coordinator's unless `program` names another): the flag,
    `COHORT_PROGRAM_ID` (the coordinator's), the id `cohort deploy` recorded in the deployments file, or the
    Anchorfile's [programs.<cluster>] (each program by its name there)."""
    value = program_id or (os.environ.get("COHORT_PROGRAM_ID") if program == PROGRAM_NAME else None)
    for table in (workspace.deployed, workspace.programs):
        value = value or table.get(cluster.name, {}).get(program)
    if not value:
        where = workspace.path or ANCHORFILE
        raise ConfigError(
            f"no {program} program id for cluster {cluster.name!r} in {where}: "
            f"run `cohort deploy{_program_flag(program)} --cluster {cluster.name}` (or pass --program-id)"
        )
    try:
        return Pubkey.from_string(value)
    except ValueError:
        raise ConfigError(f"program id {value!r} is not a base58 address") from None


def _program_flag(program: str) -> str:
    return "" if program == PROGRAM_NAME else f" --program {program}"


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


def record_deployment(
    workspace: Workspace, cluster: str, program_id: Pubkey, program: str = PROGRAM_NAME
) -> Path:
    """Remember a deployed program's id in the workspace's untracked deployments file; returns its path."""
    folder = workspace.state_dir
    folder.mkdir(parents=True, exist_ok=True)
    if workspace.path is not None and not (folder / ".gitignore").exists():
        (folder / ".gitignore").write_text("# local state of cohort, never committed\n*\n")
    write_program_id(workspace.deployments, cluster, program_id, program)
    workspace.deployed.setdefault(cluster, {})[program] = str(program_id)
    return workspace.deployments


_DEPLOYMENTS_HEADER = (
    "# Program ids `cohort deploy` deployed from this machine (not for version control).\n"
)
