"""Start a serving node (`python -m cohort.client.p2p serve`) as a child process.

Used wherever a peer must really be another process: to kill it mid-transfer, or so that server and
client do not share an interpreter when measuring throughput. The child stops when `stop` is called
or when this process's end of its stdin pipe closes, whichever comes first.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable

from .identity import NodeId
from .transport import PeerAddress


class PeerProcess:
    def __init__(
        self,
        transport: str,
        allow: Iterable[NodeId],
        *args: str,
        ready_timeout: float = 30.0,
    ) -> None:
        cmd = [
            sys.executable,
            "-m",
            "cohort.client.p2p",
            "serve",
            "--transport",
            transport,
            "--stdin-lifeline",
        ]
        for node_id in allow:
            cmd += ["--allow", node_id.hex()]
        self._errors = (
            tempfile.TemporaryFile()
        )  # a file, not a pipe: a chatty child never blocks on it
        self.proc = subprocess.Popen(
            [*cmd, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._errors
        )
        try:
            info = json.loads(self._read_line(ready_timeout))
        except BaseException:
            self.stop()
            raise
        self.address = PeerAddress(NodeId.from_hex(info["node_id"]), tuple(info["addrs"]))
        self.blobs = [bytes.fromhex(b) for b in info["blobs"]]
        self.manifests = [bytes.fromhex(m) for m in info["manifests"]]

    def _read_line(self, timeout: float) -> bytes:
        deadline = time.monotonic() + timeout
        line = b""
        while not line.endswith(b"\n") and time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.2)
            if ready:
                data = os.read(self.proc.stdout.fileno(), 4096)
                if not data:
                    break
                line += data
        if not line.endswith(b"\n"):
            self._errors.seek(0)
            raise RuntimeError(
                f"peer process did not start: {self._errors.read().decode()[-2000:]}"
            )
        return line

    def stop(self) -> None:
        """Kill the process (if alive), reap it and release its pipes."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
        for stream in (self.proc.stdin, self.proc.stdout, self._errors):
            stream.close()

    def __enter__(self) -> PeerProcess:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
