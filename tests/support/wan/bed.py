"""`WanBed`: named nodes, each in its own network namespace behind an emulated access link.

    with WanBed({"a": Link(delay_ms=20), "b": (Link(rate_mbit=5), Link(rate_mbit=50))}) as bed:
        subprocess.run([*bed.prefix("b"), "python", "server.py", "--host", bed.address("b")])

Each node gets a namespace `cwan-<pid>-<token>-<node>` with `lo` up and a TUN device `wan0` holding
10.X.Y.k/24 (X.Y random per bed, k from 2); the /24 is routed through the TUN, so every node reaches
every other through the router process. The root namespace joins as node "host" (10.X.Y.1, a
zero-delay link unless `host=` says otherwise) so the test process itself can reach the nodes.
Usable as `with` and as `async with` (setup and teardown then run in a worker thread).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import secrets
import select
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .link import Link, LinkStats
from .netns import (
    PREFIX,
    WanUnavailable,
    check_available,
    cleanup_stale,
    delete_netns,
    free_subnet,
    ip,
    list_netns,
)
from .process import stop_group

HOST = "host"
TUN_NAME = "wan0"
_NODE_NAME = re.compile(r"^[A-Za-z0-9_]{1,24}$")
_TESTS_DIR = Path(__file__).resolve().parents[2]  # tests/: makes `support.wan.router` importable

Profile = Link | tuple[Link, Link]  # one profile for both directions, or (uplink, downlink)
ZERO = Link()  # the host's default: no delay, no loss, unlimited


@dataclass(frozen=True)
class WanStats:
    links: dict[str, dict[str, LinkStats]]  # node -> {"up": ..., "down": ...}
    unroutable: int  # packets to no node of the bed (IPv6, other subnets): dropped
    write_errors: int  # packets the kernel refused when the router delivered them
    held_bytes: int  # what the router holds now (delay lines, queues), with per-packet overhead
    peak_held_bytes: int
    cpu_seconds: float  # the router's user + system CPU time so far
    late_releases: int  # packets released > 1 ms after their due time (router or machine too busy)
    late_max_ms: float
    realtime: bool  # whether the router runs SCHED_FIFO now (it steps down while busy)


def _pair(profile: Profile) -> tuple[Link, Link]:
    if isinstance(profile, Link):
        return profile, profile
    up, down = profile
    if not (isinstance(up, Link) and isinstance(down, Link)):
        raise TypeError("a node's profile is a Link or a (uplink, downlink) pair of Links")
    return up, down


class WanBed:
    def __init__(
        self,
        nodes: Mapping[str, Profile],
        *,
        host: Profile | None = ZERO,
        mtu: int = 1500,
        seed: int | None = None,
        max_held_bytes: int = 64 << 20,
        router_nice: int = -10,
        router_realtime: bool = True,
        ready_timeout: float = 15.0,
    ) -> None:
        if not nodes:
            raise ValueError("a bed needs at least one node")
        if len(nodes) > 250:
            raise ValueError("at most 250 nodes fit the bed's /24")
        for name in nodes:
            if name == HOST or not _NODE_NAME.match(name):
                raise ValueError(f"node names are 1-24 of [A-Za-z0-9_] and not {HOST!r}: {name!r}")
        if not 576 <= mtu <= 65535:
            raise ValueError(f"mtu must be within 576..65535, got {mtu}")
        self._links: dict[str, tuple[Link, Link]] = {n: _pair(p) for n, p in nodes.items()}
        if host is not None:
            self._links = {HOST: _pair(host), **self._links}
        self.mtu, self.seed, self.max_held_bytes = mtu, seed, max_held_bytes
        # the router's timing must beat busy neighbours (tests, clients): SCHED_FIFO while it uses
        # under ~70% of a core (see router.Priority), and nice -10 in any case
        self.router_nice, self.router_realtime = router_nice, router_realtime
        self.ready_timeout = ready_timeout
        self.token = secrets.token_hex(3)
        self._netns: dict[str, str | None] = {}
        self._address: dict[str, str] = {}
        self._router: subprocess.Popen[bytes] | None = None
        self._router_log: Any = None
        self._processes: list[subprocess.Popen[Any]] = []
        self._lock = threading.Lock()

    # -- the API the project uses ---------------------------------------------------------------------
    @property
    def names(self) -> list[str]:
        return list(self._links)

    def address(self, name: str) -> str:
        """The node's IPv4 address (bind servers to it; peers reach it through the links)."""
        return self._address[self._known(name)]

    def netns(self, name: str) -> str | None:
        """The node's namespace name (None for "host": the root namespace)."""
        return self._netns[self._known(name)]

    def prefix(self, name: str) -> list[str]:
        """argv prefix that runs a command inside the node's namespace ([] for "host")."""
        ns = self.netns(name)
        return [] if ns is None else ["ip", "netns", "exec", ns]

    def popen(self, name: str, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
        """Start `argv` inside the node in its own process group; stopped when the bed closes."""
        kwargs.setdefault("start_new_session", True)
        process = subprocess.Popen([*self.prefix(name), *argv], **kwargs)
        self._processes.append(process)
        return process

    def link(self, name: str) -> tuple[Link, Link]:
        """The node's current (uplink, downlink)."""
        return self._links[self._known(name)]

    def set_link(self, name: str, uplink: Link, downlink: Link | None = None) -> None:
        """Change a node's profile now (downlink defaults to the uplink's); queued packets keep
        the times they were given."""
        up, down = uplink, downlink if downlink is not None else uplink
        self._request(
            {
                "op": "set_link",
                "node": self._known(name),
                "up": up.to_dict(),
                "down": down.to_dict(),
            }
        )
        self._links[name] = (up, down)

    def stats(self) -> WanStats:
        answer = self._request({"op": "stats"})
        links = {
            name: {d: LinkStats(**counts) for d, counts in dirs.items()}
            for name, dirs in answer["links"].items()
        }
        return WanStats(
            links,
            answer["unroutable"],
            answer["write_errors"],
            answer["held_bytes"],
            answer["peak_held_bytes"],
            answer["cpu_seconds"],
            answer["late_releases"],
            answer["late_max_ms"],
            answer["realtime"],
        )

    @property
    def router_pid(self) -> int | None:
        return None if self._router is None else self._router.pid

    # -- setup ----------------------------------------------------------------------------------------
    def __enter__(self) -> WanBed:
        if self._router is not None:
            raise RuntimeError("this bed is already running (a WanBed is entered once)")
        check_available()
        cleanup_stale()  # namespaces of beds whose process was killed (never a live bed's)
        try:
            self._setup()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> WanBed:
        return await asyncio.to_thread(self.__enter__)

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.close)

    def _setup(self) -> None:
        subnet = free_subnet()
        hosts = list(subnet.hosts())
        nodes = []
        for i, (name, (up, down)) in enumerate(self._links.items()):
            ns = None if name == HOST else f"{PREFIX}{os.getpid()}-{self.token}-{name}"
            index = 0 if name == HOST else i + (0 if HOST in self._links else 1)
            self._address[name] = str(hosts[index])
            if ns is not None:
                try:
                    ip("netns", "add", ns)
                except RuntimeError as e:
                    if not self._netns:  # the very first one: the machine cannot do this at all
                        raise WanUnavailable(f"cannot create network namespaces: {e}") from e
                    raise
            self._netns[name] = ns
            ifname = TUN_NAME if ns is not None else f"cw{self.token}"
            nodes.append(
                {
                    "name": name,
                    "netns": ns,
                    "ifname": ifname,
                    "address": self._address[name],
                    "up": up.to_dict(),
                    "down": down.to_dict(),
                }
            )
        self._start_router(
            {
                "nodes": nodes,
                "seed": self.seed,
                "max_held_bytes": self.max_held_bytes,
                "nice": self.router_nice,
                "realtime": self.router_realtime,
            }
        )
        for node in nodes:
            commands = [
                f"addr add {node['address']}/24 dev {node['ifname']}",
                f"link set {node['ifname']} mtu {self.mtu} up",
            ]
            if node["netns"] is not None:
                commands.insert(0, "link set lo up")
            ip("-b", "-", netns=node["netns"], stdin="\n".join(commands) + "\n")

    def _start_router(self, config: dict[str, Any]) -> None:
        self._router_log = (
            tempfile.TemporaryFile()
        )  # a file, not a pipe: it never blocks the router
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(
                filter(None, [str(_TESTS_DIR), os.environ.get("PYTHONPATH")])
            ),
        }
        self._router = subprocess.Popen(
            [sys.executable, "-m", "support.wan.router", json.dumps(config)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._router_log,
            env=env,
            start_new_session=True,
        )
        first = self._read_answer(self.ready_timeout)
        if not first.get("ready"):
            error = first.get("error", "no ready line")
            if "TUN" in error:
                raise WanUnavailable(f"the WAN bed's router {error}")
            raise RuntimeError(f"the WAN bed's router did not start: {error}")

    # -- the control pipe -----------------------------------------------------------------------------
    def _request(self, request: dict[str, Any], timeout: float = 5.0) -> dict[str, Any]:
        with self._lock:
            router = self._router
            if router is None or router.poll() is not None:
                raise RuntimeError(f"the WAN bed's router is not running{self._router_stderr()}")
            assert router.stdin is not None
            router.stdin.write(json.dumps(request).encode() + b"\n")
            router.stdin.flush()
            answer = self._read_answer(timeout)
        if not answer.get("ok"):
            raise RuntimeError(
                f"the WAN bed's router refused {request['op']}: {answer.get('error')}"
            )
        return answer

    def _read_answer(self, timeout: float) -> dict[str, Any]:
        assert self._router is not None and self._router.stdout is not None
        out, line = self._router.stdout, b""
        until = time.monotonic() + timeout
        while not line.endswith(b"\n"):
            left = until - time.monotonic()
            if left <= 0 or not select.select([out], [], [], left)[0]:
                raise RuntimeError(
                    f"the WAN bed's router did not answer within {timeout:.0f} s"
                    f"{self._router_stderr()}"
                )
            chunk = os.read(out.fileno(), 65536)
            if not chunk:
                raise RuntimeError(f"the WAN bed's router exited{self._router_stderr()}")
            line += chunk
        return json.loads(line)

    def _router_stderr(self) -> str:
        if self._router_log is None:
            return ""
        self._router_log.seek(0)
        text = self._router_log.read()[-2000:].decode(errors="replace").strip()
        return f": {text}" if text else ""

    # -- teardown -------------------------------------------------------------------------------------
    def close(self) -> None:
        """Stop every process of the bed, the router, and delete the namespaces. Idempotent."""
        for process in self._processes:
            stop_group(process)
        self._processes.clear()
        names = [ns for ns in self._netns.values() if ns is not None]
        for ns in names:  # whatever else still runs inside (started through `prefix`)
            delete_netns(ns)
        if self._router is not None:
            _stop_router(self._router)
            self._router = None
        if self._router_log is not None:
            self._router_log.close()
            self._router_log = None
        self._netns.clear()
        left = set(names) & set(list_netns())
        if left:
            raise RuntimeError(f"namespaces survived teardown: {sorted(left)}")

    def _known(self, name: str) -> str:
        if name not in self._links:
            raise KeyError(f"no node {name!r} in this bed (nodes: {', '.join(self._links)})")
        return name


def _stop_router(router: subprocess.Popen[bytes]) -> None:
    """Close its lifeline (it exits by itself), then SIGTERM, then SIGKILL; always reaped."""
    assert router.stdin is not None and router.stdout is not None
    with contextlib.suppress(OSError):
        router.stdin.close()
    try:
        router.wait(3)
    except subprocess.TimeoutExpired:
        stop_group(router)
    router.stdout.close()
