"""Processes inside a bed's nodes: stopping a process group, reading a child's lines with a deadline."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import tempfile
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .bed import WanBed


def stop_group(process: subprocess.Popen[Any], grace: float = 3.0) -> None:
    """SIGTERM the process group, SIGKILL it after `grace` s; reaped, pipes closed."""
    if process.poll() is None:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(grace)
                break
    for stream in (process.stdin, process.stdout, process.stderr):
        if stream is not None:
            stream.close()


class NodeProcess:
    """A process inside a node whose stdout is read line by line with a deadline (stderr goes to a
    file, so a chatty child never blocks); stopped by `close` or when the bed closes."""

    def __init__(
        self, bed: WanBed, node: str, argv: list[str], stdin: int | None = subprocess.DEVNULL
    ) -> None:
        self._errors = tempfile.TemporaryFile()
        self.process = bed.popen(
            node, argv, stdout=subprocess.PIPE, stderr=self._errors, stdin=stdin
        )
        self._buffer = b""

    def json_line(self, timeout: float) -> dict[str, Any]:
        """The next stdout line, parsed as JSON."""
        return json.loads(self.read_line(timeout))

    def read_line(self, timeout: float) -> str:
        """The next stdout line (without its newline); RuntimeError with the stderr tail if the
        process ends or stays silent for `timeout` s."""
        out = self.process.stdout
        assert out is not None
        until = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = until - time.monotonic()
            chunk = (
                os.read(out.fileno(), 65536)
                if left > 0 and select.select([out], [], [], left)[0]
                else b""
            )
            if not chunk:
                self._errors.seek(0)
                stderr = self._errors.read()[-2000:].decode(errors="replace")
                raise RuntimeError(
                    f"{self.process.args} gave no line within {timeout:.0f} s: {stderr}"
                )
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.decode()

    def close(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)  # its own group (bed.popen)
        self.process.wait(5)
        for stream in (self.process.stdin, self.process.stdout, self._errors):
            if stream is not None:
                stream.close()
