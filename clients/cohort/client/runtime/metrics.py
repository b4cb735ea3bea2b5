"""`cohort train --metrics DIR` / `--metrics-port PORT`: the client's training and network figures for the tools
people already use, TensorBoard event files under DIR (`tensorboard --logdir DIR`) and an OpenMetrics text
endpoint on 127.0.0.1:PORT/metrics (Prometheus, Grafana Agent, `curl`).

The figures are the ones the explorer charts from the witnesses (loss, tokens/s, bytes sent and received,
held-out loss) plus what only the client knows (step and apply time, peers, checkpoint fetch progress). They
come from the client's own events (events.py): one mapping, `points`, turns an event into figures, so every
sink shows the same numbers as the `--events` file.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Protocol


@dataclass(frozen=True)
class Point:
    name: str  # e.g. "train/loss": TensorBoard's tag; the OpenMetrics name is cohort_train_loss
    value: float
    step: int | None  # the training step it belongs to (None: the latest step seen)
    help: str


# event -> (field, figure name, help): the figures each client event carries
FIGURES: dict[str, tuple[tuple[str, str, str], ...]] = {
    "trained": (("loss", "train/loss", "training loss of this client's last step"),
                ("seconds", "train/step_seconds", "seconds this client's last step took"),
                ("tokens_per_sec", "train/tokens_per_sec", "tokens per second of this client's last step"),
                ("bytes", "network/result_bytes", "bytes of this client's last compressed result"),
                ("waited", "train/step_wait_seconds", "seconds this client's last step waited for its model worker")),
    "evaluated": (("loss", "eval/loss", "held-out loss"),
                  ("perplexity", "eval/perplexity", "held-out perplexity")),
    "apply_time": (("seconds", "train/apply_seconds", "seconds the last decided step took to apply"),
                   ("waited", "train/apply_wait_seconds", "seconds the last apply waited for the model worker")),
    "traffic": (("sent", "network/bytes_sent", "bytes this client's P2P node sent, in all"),
                ("received", "network/bytes_received", "bytes this client's P2P node received, in all"),
                ("peers", "network/peers", "peers of this epoch this client has addresses for"),
                ("requests", "network/requests", "P2P requests sent and served, in all"),
                ("dials", "network/dials", "P2P connections dialled, in all")),
    "checkpoint_progress": (("bytes_done", "checkpoint/fetched_bytes", "bytes of the checkpoint being fetched"),
                            ("bytes_total", "checkpoint/total_bytes", "bytes of the checkpoint being fetched, in all"),
                            ("rate", "checkpoint/bytes_per_sec", "checkpoint fetch rate"),
                            ("eta", "checkpoint/eta_seconds", "seconds the checkpoint fetch has left")),
    "checkpoint_loaded": (("seconds", "checkpoint/load_seconds", "seconds the last checkpoint fetch and load took"),),
    "state": (("epoch", "run/epoch", "the run's epoch"), ("step", "run/step", "the run's step")),
}  # fmt: skip


def points(event: str, fields: dict[str, Any]) -> list[Point]:
    """The figures one client event carries (none for most events)."""
    step = fields.get("step")
    out = []
    for field, name, text in FIGURES.get(event, ()):
        value = fields.get(field)
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        out.append(Point(name, float(value), step if isinstance(step, int) else None, text))
    return out


class MetricsSink(Protocol):
    def record(self, event: str, fields: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


class TensorBoardSink:
    """Scalars in TensorBoard event files under `directory` (one file per client process)."""

    def __init__(self, directory: Path) -> None:
        # the client has torch; the tensorboard package writes the files
        from torch.utils.tensorboard import SummaryWriter

        directory.mkdir(parents=True, exist_ok=True)
        self.writer = SummaryWriter(log_dir=str(directory), flush_secs=5)
        self.step = 0

    def record(self, event: str, fields: dict[str, Any]) -> None:
        for p in points(event, fields):
            self.step = max(self.step, p.step or 0)
            self.writer.add_scalar(p.name, p.value, p.step if p.step is not None else self.step)

    def close(self) -> None:
        self.writer.close()


class OpenMetricsSink:
    """The latest value of every figure at http://127.0.0.1:PORT/metrics, in the OpenMetrics text format.
    Binds loopback only: a scraper on this machine reads it, nothing outside does."""

    CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"

    def __init__(self, port: int, host: str = "127.0.0.1") -> None:
        self.values: dict[str, tuple[float, str]] = {}
        self.lock = threading.Lock()
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                if self.path.split("?")[0] != "/metrics":
                    self.send_error(404, "only /metrics")
                    return
                body = sink.render().encode()
                self.send_response(200)
                self.send_header("Content-Type", OpenMetricsSink.CONTENT_TYPE)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(
            target=self.server.serve_forever, name="metrics", daemon=True
        )
        self.thread.start()

    def record(self, event: str, fields: dict[str, Any]) -> None:
        found = points(event, fields)
        with self.lock:
            for p in found:
                self.values["cohort_" + p.name.replace("/", "_")] = (p.value, p.help)

    def render(self) -> str:
        with self.lock:
            items = sorted(self.values.items())
        lines = []
        for name, (value, text) in items:
            lines += [f"# TYPE {name} gauge", f"# HELP {name} {text}", f"{name} {_number(value)}"]
        return "\n".join([*lines, "# EOF"]) + "\n"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


def _number(value: float) -> str:
    """OpenMetrics spells the special floats its own way (a diverged loss is NaN)."""
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


def open_sinks(directory: Path | None, port: int | None) -> list[MetricsSink]:
    """The sinks `--metrics DIR` and `--metrics-port PORT` ask for (none without either)."""
    sinks: list[MetricsSink] = []
    if directory is not None:
        sinks.append(TensorBoardSink(directory))
    if port is not None:
        try:
            sinks.append(OpenMetricsSink(port))
        except OSError as e:
            for sink in sinks:
                sink.close()
            raise ValueError(
                f"--metrics-port {port}: cannot listen on 127.0.0.1:{port} ({e.strerror})"
            ) from None
    return sinks
