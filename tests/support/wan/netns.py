"""Thin, bounded wrappers around `ip netns` and friends, and the checks that say why a bed cannot run.

Namespace names carry the creating process's pid (`cwan-<pid>-<token>-<node>`), so `cleanup_stale`
can tell a dead bed's leftovers from a live bed's.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import random
import re
import shutil
import signal
import subprocess
import time

PREFIX = "cwan-"
_NAME = re.compile(rf"^{PREFIX}(\d+)-([0-9a-f]+)-")


class WanUnavailable(RuntimeError):
    """This machine cannot host a bed (not root, no `ip netns`, no TUN); the message says which."""


def check_available() -> None:
    """Raise WanUnavailable naming the first missing prerequisite."""
    if os.geteuid() != 0:
        raise WanUnavailable(
            "the WAN bed needs root (CAP_NET_ADMIN) for network namespaces and TUN"
        )
    if shutil.which("ip") is None:
        raise WanUnavailable("the WAN bed needs iproute2's `ip` on PATH (ip netns, ip link)")
    if not os.path.exists("/dev/net/tun"):
        raise WanUnavailable("the WAN bed needs /dev/net/tun (TUN devices); it is missing here")


def ip(
    *args: str, netns: str | None = None, stdin: str | None = None, timeout: float = 10.0
) -> str:
    """Run `ip [-n NETNS] ARGS`, return stdout; RuntimeError with ip's message on failure."""
    argv = ["ip", *(["-n", netns] if netns else []), *args]
    try:
        done = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"`{' '.join(argv)}` took more than {timeout:.0f} s") from None
    if done.returncode != 0:
        raise RuntimeError(f"`{' '.join(argv)}` failed: {done.stderr.strip() or done.returncode}")
    return done.stdout


def list_netns() -> list[str]:
    return [line.split()[0] for line in ip("netns", "list").splitlines() if line.strip()]


def netns_pids(name: str) -> list[int]:
    try:
        return [int(p) for p in ip("netns", "pids", name).split()]
    except RuntimeError:  # already gone
        return []


def kill_netns_processes(name: str, grace: float = 3.0) -> None:
    """SIGTERM everything still running inside the namespace, SIGKILL what survives `grace` s."""
    pids = netns_pids(name)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        until = time.monotonic() + grace
        while pids and time.monotonic() < until:
            time.sleep(0.02)
            pids = [p for p in pids if _alive(p)]
        if not pids:
            return


def _alive(pid: int) -> bool:
    try:  # a zombie (a child of ours not yet reaped) no longer holds the namespace's sockets
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def delete_netns(name: str) -> None:
    kill_netns_processes(name)
    with contextlib.suppress(RuntimeError):
        ip("netns", "del", name)


def cleanup_stale(everything: bool = False) -> list[str]:
    """Delete bed namespaces whose creating process is dead (all bed namespaces if `everything`);
    returns their names. Their TUN devices and routers go with them (a router exits when its bed
    dies)."""
    removed = []
    for name in list_netns():
        match = _NAME.match(name)
        if match is None:
            continue
        if everything or not _alive(int(match.group(1))):
            delete_netns(name)
            removed.append(name)
    return removed


def free_subnet() -> ipaddress.IPv4Network:
    """A random 10.X.Y.0/24 (X in 128..254) that no route or address of this namespace overlaps."""
    used = []
    for line in (
        ip("-4", "route", "show", "table", "all").splitlines() + ip("-4", "-o", "addr").splitlines()
    ):
        for word in line.split():
            with contextlib.suppress(ValueError):
                if word[0].isdigit():
                    used.append(ipaddress.ip_network(word, strict=False))
    rng = random.SystemRandom()
    for _ in range(1000):
        net = ipaddress.IPv4Network(f"10.{rng.randint(128, 254)}.{rng.randint(0, 255)}.0/24")
        if not any(net.overlaps(u) for u in used):
            return net
    raise RuntimeError("no free 10.X.Y.0/24 for the WAN bed")
