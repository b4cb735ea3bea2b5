"""Many `cohort train` processes on one machine: one process imports the client once (torch, the model
code, iroh, the SDK: ~270 MB of private memory and seconds of CPU in every process that imports them),
then forks each client from itself. Every child is a process of its own (own process group,
wallet, sockets, P2P endpoint and event loop) that shares the imported pages copy-on-write, so 64 clients
fit in the memory 20 would take. Used by LocalRun(fork_clients=True), e.g. benchmarks/client/scale.py.

    python -m cohort.client.runtime.zygote      # requests on stdin, one JSON object per line

A request {"argv": [...], "env": {...}, "log": path} forks `cohort <argv>` with exactly that environment and
its output appended to `log`; the answer is {"pid": n}. When a child exits, {"exited": n, "code": c}
follows (c: the exit status, or minus the signal that killed it). Malformed requests are answered
{"error": why}. The zygote exits when stdin closes; its children do not (they are stopped by group).
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import IO, Any

MAX_REQUEST = 1 << 20  # bytes of one request line


def _preload() -> None:
    """Everything `cohort train` imports (real and synthetic trainers alike), so no child imports it again."""
    import iroh  # noqa: F401

    import cohort.client.runtime.loop
    import cohort.client.runtime.synthetic
    import cohort.client.runtime.trainer
    import cohort.sdk.cli  # noqa: F401


def _request(line: bytes) -> tuple[list[str], dict[str, str], str]:
    value = json.loads(line)
    if not isinstance(value, dict):
        raise ValueError("a request is a JSON object")
    argv, env, log = value.get("argv"), value.get("env"), value.get("log")
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        raise ValueError("argv: a list of strings")
    if not isinstance(env, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in env.items()
    ):
        raise ValueError("env: an object of strings")
    if not isinstance(log, str) or not log:
        raise ValueError("log: a file path")
    return argv, env, log


def _child(argv: list[str], env: dict[str, str], log: str) -> None:
    """In the forked child: a process group of its own, the request's environment and log, then the CLI;
    never returns."""
    code = 1
    try:
        os.setpgid(
            0, 0
        )  # its own process group (the parent sets it too: killpg works from the first moment)
        out = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.close(out)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        os.environ.clear()
        os.environ.update(env)
        sys.argv = ["cohort", *argv]
        sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
        from cohort.sdk.cli import main

        main()
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def serve(requests: IO[bytes], answers: IO[bytes]) -> None:
    """Fork a child per request line until `requests` closes; report every child's exit."""
    _preload()
    gc.collect()
    gc.freeze()  # the collector would otherwise touch, and so copy, every preloaded object in every child
    children: set[int] = set()

    def say(message: dict[str, Any]) -> None:
        answers.write(json.dumps(message).encode() + b"\n")
        answers.flush()

    def reap() -> None:
        for pid in list(children):
            with contextlib.suppress(ChildProcessError):
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    children.discard(pid)
                    say({"exited": pid, "code": os.waitstatus_to_exitcode(status)})

    fd, pending = requests.fileno(), b""
    while True:
        ready, _, _ = select.select([fd], [], [], 0.2)
        reap()
        if not ready:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        pending += chunk
        if len(pending) > MAX_REQUEST and b"\n" not in pending:
            say({"error": f"a request is at most {MAX_REQUEST} bytes"})
            pending = b""
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            try:
                argv, env, log = _request(line)
            except ValueError as e:
                say({"error": str(e)})
                continue
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                _child(argv, env, log)
            with contextlib.suppress(OSError):  # ESRCH: it already ended (and is reaped below)
                os.setpgid(pid, pid)
            children.add(pid)
            say({"pid": pid})
    deadline = (
        time.monotonic() + 5
    )  # reap what already ended; the rest are re-parented, still stoppable
    while children and time.monotonic() < deadline:
        reap()
        time.sleep(0.05)


@dataclass
class ForkedProcess:
    """A child of the zygote, with the part of subprocess.Popen's interface that LocalRun uses. Its exit
    status comes from the zygote; should the zygote be gone, whether the pid still lives is all we learn
    (returncode -1: ended, status unknown)."""

    pid: int
    returncode: int | None = None
    orphaned: bool = False
    _exited: threading.Event = field(default_factory=threading.Event, repr=False)

    def poll(self) -> int | None:
        if self.returncode is None and self.orphaned:
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                self.returncode = -1
                self._exited.set()
            except PermissionError:
                pass
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            left = 0.1 if deadline is None else min(0.1, deadline - time.monotonic())
            if left <= 0:
                raise subprocess.TimeoutExpired(f"forked process {self.pid}", timeout or 0)
            self._exited.wait(left)
        return self.returncode  # type: ignore[return-value]


class Zygote:
    """The zygote process, seen from its parent: `start` forks one client and returns its handle."""

    def __init__(self, log: str) -> None:
        with open(log, "ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "cohort.client.runtime.zygote"], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=out, start_new_session=True,
            )  # fmt: skip
        self._lock = threading.Lock()
        self._answers: list[ForkedProcess | str] = []  # a child, or why a request was refused
        self._answered = threading.Condition(self._lock)
        self._children: dict[int, ForkedProcess] = {}
        self._reader = threading.Thread(target=self._read, name="zygote", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with contextlib.suppress(ValueError, TypeError, KeyError):
                message = json.loads(line)
                with self._lock:
                    if (
                        "exited" in message
                    ):  # a child is known before its exit is read: answers come in order
                        child = self._children.pop(message["exited"], None)
                        if child is not None:
                            child.returncode = int(message["code"])
                            child._exited.set()
                        continue
                    if "pid" in message:
                        child = self._children[int(message["pid"])] = ForkedProcess(
                            int(message["pid"])
                        )
                        self._answers.append(child)
                    else:
                        self._answers.append(str(message.get("error")))
                    self._answered.notify_all()
        with self._lock:  # the zygote is gone: so is what it could tell us
            for child in self._children.values():
                child.orphaned = True
            self._answered.notify_all()

    def start(
        self, argv: list[str], env: dict[str, str], log: str, timeout: float = 60.0
    ) -> ForkedProcess:
        """Fork `cohort <argv>` with environment `env`, its output appended to `log`."""
        assert self.process.stdin is not None
        with self._lock:
            self.process.stdin.write(
                json.dumps({"argv": argv, "env": env, "log": log}).encode() + b"\n"
            )
            self.process.stdin.flush()
            if not self._answered.wait_for(
                lambda: self._answers or self.process.poll() is not None, timeout
            ):
                raise RuntimeError(f"the zygote did not answer within {timeout:.0f} s")
            if not self._answers:
                raise RuntimeError("the zygote exited")
            answer = self._answers.pop(0)
            if isinstance(answer, str):
                raise RuntimeError(f"the zygote refused: {answer}")
            return answer

    def close(self, timeout: float = 10.0) -> None:
        """Let the zygote exit (its children are stopped by their own process groups, not by this)."""
        with contextlib.suppress(OSError):
            self.process.stdin.close()  # type: ignore[union-attr]
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)
        self._reader.join(5)


if __name__ == "__main__":
    serve(sys.stdin.buffer, sys.stdout.buffer)
