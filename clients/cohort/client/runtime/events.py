"""What the client tells the outside: structured events (JSONL) and a console view.

Every event is one JSON object per line `{"t": unix time, "event": name, ...fields}` in the `--events`
file; tests and supervisors read these, never the console text. The console shows the same events as
short human lines (`--logs console`) or as JSON (`--logs json`); on a terminal the console also keeps a
live status line at the bottom (phase, step, loss, tokens/s, peers).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any, TextIO

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.text import Text


class Events:
    """Emit events to a JSONL file and to the console."""

    def __init__(self, path: str | Path | None = None, logs: str = "console",
                 console: Console | None = None, name: str = "") -> None:  # fmt: skip
        if logs not in ("console", "json", "none"):
            raise ValueError(f"logs must be console, json or none, got {logs!r}")
        self._file: TextIO | None = open(path, "a", buffering=1) if path else None
        self.logs = logs
        self.console = console or Console(stderr=False, highlight=False)
        self.name = name
        self._lock = threading.Lock()
        self._status: dict[str, Any] = {}
        self.sinks: list[
            Any
        ] = []  # metrics.MetricsSink: each sees every event (--metrics, --metrics-port)
        self._live: Live | None = None
        if logs == "console" and self.console.is_terminal:
            self._live = Live(Text(""), console=self.console, refresh_per_second=4, transient=True)
            self._live.start()

    def status(self, **fields: Any) -> None:
        """Update the live status line (terminal only)."""
        self._status.update(fields)
        if self._live is not None:
            parts = [f"{k} {v}" for k, v in self._status.items() if v is not None]
            self._live.update(Text(("cohort " + self.name + " | " if self.name else "cohort | ") + " | ".join(parts),
                                   style="bold cyan"))  # fmt: skip

    def emit(self, event: str, **fields: Any) -> None:
        record = {"t": round(time.time(), 3), "event": event, **fields}
        line = json.dumps(record, default=str)
        with self._lock:
            if self._file is not None:
                self._file.write(line + "\n")
            for sink in self.sinks:
                sink.record(event, fields)
            if self.logs == "json":
                sys.stdout.write(line + "\n")
                sys.stdout.flush()
            elif self.logs == "console":
                self.console.print(self._human(event, fields))

    def _human(self, event: str, fields: dict[str, Any]) -> str:
        who = f"[dim]{escape(self.name)}[/] " if self.name else ""
        if event == "trained":
            return (f"{who}step {fields['step']:>4}  loss {fields['loss']:.4f}  "
                    f"{fields['tokens_per_sec']:,.0f} tok/s  {fields['seconds']:.2f} s")  # fmt: skip
        if event == "state":
            return f"{who}[bold]{escape(str(fields['state']))}[/] epoch {fields['epoch']} step {fields['step']}"
        text = " ".join(f"{k}={v}" for k, v in fields.items())
        return f"{who}{escape(event)} {escape(text)}"

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()
        self.sinks = []
        if self._live is not None:
            self._live.stop()
            self._live = None
        if self._file is not None:
            self._file.close()
            self._file = None
