"""The router process: moves IPv4 packets between the nodes' TUN devices through their links.

    python -m support.wan.router CONFIG_JSON      (started by WanBed; needs CAP_NET_ADMIN)

CONFIG_JSON: {"nodes": [{"name", "netns" (null: this namespace), "ifname", "address", "up", "down"}],
"seed": int | null, "max_held_bytes": int, "nice": int, "realtime": bool}. It opens one TUN device
per node inside the node's namespace, prints one JSON line ({"ready": true} or {"ok": false,
"error": ...}) and then serves.

A packet from A to B pays A's uplink, then B's downlink: two `Pipe`s and two entries in one heap of
due times. Control: one JSON request per line on stdin, one JSON answer per line on stdout
({"op": "set_link", "node", "up", "down"} and {"op": "stats"}). stdin is also the lifeline: the router
exits when it closes (its parent died or let go), on SIGTERM, or when its parent process changes.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import heapq
import json
import os
import random
import select
import signal
import socket
import struct
import sys
import time
from typing import Any

from .link import Link
from .pipe import Pipe

TUNSETIFF = 0x400454CA
IFF_TUN, IFF_NO_PI = 0x0001, 0x1000
CLONE_NEWNET = 0x40000000
READ_BATCH = 64  # packets read from one TUN per wakeup, so one busy node cannot starve the others
EARLY = 0.0005  # epoll sleeps in whole ms: release packets up to 0.5 ms early so errors centre on 0
HOLD_OVERHEAD = 120  # bytes charged per held packet on top of its size (heap entry, objects)
MAX_CONTROL_LINE = 1 << 16
LATE = 0.001  # a release this much after its due time counts as late (the router fell behind)


class Node:
    def __init__(self, spec: dict[str, Any], fd: int, rng: random.Random) -> None:
        self.name: str = spec["name"]
        self.fd = fd
        self.up = Pipe(Link.from_dict(spec["up"]), rng)
        self.down = Pipe(Link.from_dict(spec["down"]), rng)


def _setns(fd: int) -> None:
    if hasattr(os, "setns"):  # Python 3.12+
        os.setns(fd, CLONE_NEWNET)
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"setns: {os.strerror(code)}")


def open_tun(ifname: str, netns: str | None) -> int:
    """A non-blocking TUN fd (no packet info header) for a new device `ifname` inside `netns`.

    The device lives in whichever namespace this thread is in at TUNSETIFF, so enter it, create, and
    come back; the fd keeps working from here. IPv6 is switched off on it (router solicitations and
    MLD would only be unroutable noise)."""
    home = os.open("/proc/self/ns/net", os.O_RDONLY)
    target = os.open(f"/run/netns/{netns}", os.O_RDONLY) if netns else None
    try:
        if target is not None:
            _setns(target)
        try:
            fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
            try:
                fcntl.ioctl(
                    fd, TUNSETIFF, struct.pack("16sH", ifname.encode(), IFF_TUN | IFF_NO_PI)
                )
            except OSError:
                os.close(fd)
                raise
            with contextlib.suppress(OSError):  # /proc/sys/net follows this thread's namespace
                with open(f"/proc/sys/net/ipv6/conf/{ifname}/disable_ipv6", "w") as f:
                    f.write("1")
        finally:
            if target is not None:
                _setns(home)
    finally:
        os.close(home)
        if target is not None:
            os.close(target)
    return fd


class Priority:
    """SCHED_FIFO while the router is cheap, normal scheduling while it is busy.

    On a loaded machine a normal-priority router wakes milliseconds late (measured: up to 8 ms at load
    5 on 2 cores, even at nice -10); real-time priority keeps releases within ~1 ms. A real-time
    process that saturates a core would starve its neighbours, so above BUSY of a core over the last
    second the router steps down, and back up once it is under IDLE."""

    BUSY, IDLE = 0.7, 0.4

    def __init__(self, wanted: bool) -> None:
        self.wanted, self.realtime = wanted, False
        self.reset()
        if wanted:
            self._set(True)

    def _set(self, realtime: bool) -> None:
        policy = os.SCHED_FIFO if realtime else os.SCHED_OTHER
        try:
            os.sched_setscheduler(0, policy, os.sched_param(1 if realtime else 0))
            self.realtime = realtime
        except OSError:  # not permitted (no CAP_SYS_NICE, RT throttled group): stay as we are
            pass

    def reset(self) -> None:
        """Measure from now (startup's own CPU burst must not count as busy)."""
        self._cpu, self._wall = _cpu_seconds(), time.monotonic()

    def check(self) -> None:
        cpu, wall = _cpu_seconds(), time.monotonic()
        share = (cpu - self._cpu) / max(wall - self._wall, 1e-3)
        self._cpu, self._wall = cpu, wall
        if self.realtime and share > self.BUSY:
            self._set(False)
        elif self.wanted and not self.realtime and share < self.IDLE:
            self._set(True)


def _cpu_seconds() -> float:
    cpu = os.times()
    return cpu.user + cpu.system


class Router:
    def __init__(self, config: dict[str, Any]) -> None:
        seed = config.get("seed")
        self.rng = random.Random(seed)
        self.max_held = int(config.get("max_held_bytes", 64 << 20))
        self.nodes: dict[str, Node] = {}
        self.by_fd: dict[int, Node] = {}
        self.by_addr: dict[bytes, Node] = {}
        try:
            for spec in config["nodes"]:
                node = Node(spec, open_tun(spec["ifname"], spec["netns"]), self.rng)
                self.nodes[node.name] = node
                self.by_fd[node.fd] = node
                self.by_addr[socket.inet_aton(spec["address"])] = node
        except BaseException:
            self.close()
            raise
        # heap entries: (due, seq, stage, node, packet); stage 0 = enter `node`'s downlink, 1 = deliver
        self.heap: list[tuple[float, int, int, Node, bytes]] = []
        self.seq = 0
        self.held = self.peak_held = 0
        self.unroutable = self.write_errors = 0
        self.late, self.late_max = 0, 0.0  # releases more than LATE after their due time
        self.control_buffer = b""
        self.priority = Priority(bool(config.get("realtime", False)))

    def close(self) -> None:
        for node in self.nodes.values():
            with contextlib.suppress(OSError):
                os.close(node.fd)
        self.nodes.clear()

    # -- packets ------------------------------------------------------------------------------------
    def ingress(self, source: Node, packet: bytes, now: float) -> None:
        if len(packet) < 20 or packet[0] >> 4 != 4:
            self.unroutable += 1
            return
        dest = self.by_addr.get(packet[16:20])
        if dest is None or dest is source:
            self.unroutable += 1
            return
        if self.held + len(packet) + HOLD_OVERHEAD > self.max_held:
            source.up.refuse()
            return
        due = source.up.admit(now, len(packet))
        if due is not None:
            self.schedule(due, 0, dest, packet, now)

    def schedule(self, due: float, stage: int, node: Node, packet: bytes, now: float) -> None:
        if due <= now and not (self.heap and self.heap[0][0] <= due):
            # due already and nothing earlier waits (else it would overtake it): e.g. the host's
            # zero-delay link, no heap round trip
            self.run_stage(due, stage, node, packet, now)
            return
        self.seq += 1
        heapq.heappush(self.heap, (due, self.seq, stage, node, packet))
        self.held += len(packet) + HOLD_OVERHEAD
        self.peak_held = max(self.peak_held, self.held)

    def run_stage(self, at: float, stage: int, node: Node, packet: bytes, now: float) -> None:
        if stage == 0:
            due = node.down.admit(at, len(packet))  # `at`: the modelled arrival, not our wakeup
            if due is not None:
                self.schedule(due, 1, node, packet, now)
            return
        try:
            os.write(node.fd, packet)
        except OSError:  # the kernel refused it (device down, queue full): a drop, like a NIC's
            self.write_errors += 1

    def release_due(self, now: float) -> None:
        heap = self.heap
        while heap and heap[0][0] <= now + EARLY:
            due, _, stage, node, packet = heapq.heappop(heap)
            self.held -= len(packet) + HOLD_OVERHEAD
            late = now - due
            if late > LATE:
                self.late += 1
                self.late_max = max(self.late_max, late)
            self.run_stage(due, stage, node, packet, now)

    def read_tun(self, node: Node, now: float) -> None:
        for _ in range(READ_BATCH):
            try:
                packet = os.read(node.fd, 65536)
            except BlockingIOError:
                return
            except OSError as e:
                if e.errno == errno.EBADFD:  # device gone (namespace deleted under us)
                    return
                raise
            self.ingress(node, packet, now)

    # -- control ------------------------------------------------------------------------------------
    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request.get("op")
        if op == "stats":
            return {"ok": True, **self.stats()}
        if op == "set_link":
            node = self.nodes.get(request.get("node", ""))
            if node is None:
                return {"ok": False, "error": f"no node {request.get('node')!r}"}
            up, down = Link.from_dict(request["up"]), Link.from_dict(request["down"])
            node.up.set(up)
            node.down.set(down)
            return {"ok": True}
        return {"ok": False, "error": f"unknown op {op!r}"}

    def stats(self) -> dict[str, Any]:
        return {
            "links": {
                n.name: {"up": vars(n.up.stats()), "down": vars(n.down.stats())}
                for n in self.nodes.values()
            },
            "unroutable": self.unroutable,
            "write_errors": self.write_errors,
            "held_bytes": self.held,
            "peak_held_bytes": self.peak_held,
            "cpu_seconds": _cpu_seconds(),
            "late_releases": self.late,
            "late_max_ms": self.late_max * 1000,
            "realtime": self.priority.realtime,
        }

    def read_control(self, fd: int) -> bool:
        """Answer complete request lines; False when stdin closed (the lifeline)."""
        data = os.read(fd, 65536)
        if not data:
            return False
        self.control_buffer += data
        while b"\n" in self.control_buffer:
            line, self.control_buffer = self.control_buffer.split(b"\n", 1)
            try:
                answer = self.handle(json.loads(line))
            except (ValueError, TypeError, KeyError) as e:
                answer = {"ok": False, "error": f"{type(e).__name__}: {e}"}
            reply(answer)
        if len(self.control_buffer) > MAX_CONTROL_LINE:
            self.control_buffer = b""
            reply({"ok": False, "error": "control line too long"})
        return True

    # -- the loop -----------------------------------------------------------------------------------
    def serve(self, control_fd: int) -> None:
        parent = os.getppid()
        poller = select.epoll()
        poller.register(control_fd, select.EPOLLIN)
        for fd in self.by_fd:
            poller.register(fd, select.EPOLLIN)
        next_parent_check = time.monotonic() + 1.0
        self.priority.reset()
        try:
            while True:
                now = time.monotonic()
                timeout = 1.0 if not self.heap else max(0.0, self.heap[0][0] - now - EARLY)
                events = poller.poll(min(timeout, 1.0), 256)
                now = time.monotonic()
                for fd, _ in events:
                    node = self.by_fd.get(fd)
                    if node is not None:
                        self.read_tun(node, now)
                    elif not self.read_control(fd):
                        return
                self.release_due(time.monotonic())
                if now > next_parent_check:
                    if os.getppid() != parent:
                        return
                    self.priority.check()
                    next_parent_check = now + 1.0
        finally:
            poller.close()


def reply(answer: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGINT, lambda *_: sys.exit(0))
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    config = json.loads(argv[1])
    with contextlib.suppress(OSError):  # timing is the product: be first in line for the CPU
        os.setpriority(os.PRIO_PROCESS, 0, int(config.get("nice", 0)))
    try:
        router = Router(config)
    except OSError as e:
        reply({"ok": False, "error": f"cannot open TUN devices: {e}"})
        return 1
    try:
        os.set_blocking(0, False)
        reply({"ready": True, "pid": os.getpid()})
        router.serve(0)
    except BrokenPipeError:  # the bed went away while we answered
        pass
    finally:
        router.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
