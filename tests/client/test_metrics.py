"""`cohort train --metrics DIR --metrics-port PORT`: the client's events become TensorBoard scalars (read back
with TensorBoard's own reader) and OpenMetrics text on 127.0.0.1 (scraped over HTTP); a checkpoint fetch
reports bytes, rate and ETA as events that reach both."""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from cohort.client.p2p import FetchProgress
from cohort.client.runtime.events import Events
from cohort.client.runtime.metrics import OpenMetricsSink, open_sinks, points
from cohort.client.runtime.weights import progress_events


def _scrape(port: int) -> tuple[str, str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        return answer.headers["Content-Type"], answer.read().decode()


def test_events_reach_tensorboard_and_the_openmetrics_endpoint(tmp_path: Path):
    events_file = tmp_path / "events.jsonl"
    events = Events(events_file, logs="none")
    events.sinks += open_sinks(tmp_path / "tb", 0)
    port = next(s for s in events.sinks if isinstance(s, OpenMetricsSink)).port
    for step, loss in ((1, 5.5), (2, 4.25), (3, float("nan"))):
        events.emit("trained", step=step, loss=loss, tokens=512, seconds=0.5, tokens_per_sec=1024.0,
                    batch=[0, 8], bytes=4096)  # fmt: skip
        events.emit("traffic", step=step, sent=1000 * step, received=2000 * step, own_uploads=1, gossip={},
                    requests=3 * step, dials=1, peers=2)  # fmt: skip
    events.emit("evaluated", step=3, loss=4.0, perplexity=54.6, tokens=2048, seconds=0.1)
    events.emit("connected", run="r", address="a")  # no figures: nothing recorded

    kind, text = _scrape(port)
    assert kind.startswith("application/openmetrics-text")
    lines = text.splitlines()
    assert lines[-1] == "# EOF"
    values = dict(line.split(" ", 1) for line in lines if not line.startswith("#"))
    assert values["cohort_train_loss"] == "NaN"  # a diverged loss, spelled the OpenMetrics way
    assert (
        values["cohort_network_bytes_received"] == "6000.0"
        and values["cohort_network_peers"] == "2.0"
    )
    assert values["cohort_eval_loss"] == "4.0" and values["cohort_train_step_seconds"] == "0.5"
    assert "# TYPE cohort_train_loss gauge" in lines
    with pytest.raises(urllib.error.HTTPError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/other", timeout=5)

    events.close()  # closes the sinks: files flushed, nothing listens any more
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    tb = EventAccumulator(str(tmp_path / "tb"))
    tb.Reload()
    loss = [(e.step, e.value) for e in tb.Scalars("train/loss")]
    assert loss[:2] == [(1, 5.5), (2, 4.25)] and len(loss) == 3
    assert [(e.step, e.value) for e in tb.Scalars("network/bytes_sent")] == [
        (1, 1000),
        (2, 2000),
        (3, 3000),
    ]
    assert {"train/tokens_per_sec", "eval/perplexity", "network/result_bytes"} <= set(
        tb.Tags()["scalars"]
    )
    # the --events file holds the same events, unchanged by the sinks
    assert [json.loads(line)["event"] for line in events_file.read_text().splitlines()][:2] == [
        "trained",
        "traffic",
    ]


def test_a_busy_metrics_port_is_one_clear_error():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(
            ValueError, match=f"--metrics-port {port}: cannot listen on 127.0.0.1:{port}"
        ):
            open_sinks(None, port)
    assert open_sinks(None, None) == []


def test_a_checkpoint_fetch_reports_bytes_rate_and_eta(tmp_path: Path):
    events = Events(tmp_path / "events.jsonl", logs="none")
    sink = OpenMetricsSink(0)
    events.sinks.append(sink)
    report = progress_events(events, every=3600)  # the first and the last report only
    progress = FetchProgress(bytes(32), bytes_total=100 << 20, parts_total=4)
    progress.started = time.monotonic() - 2.0
    for done in range(1, 5):
        progress.bytes_done, progress.parts_done = done * (25 << 20), done
        report(progress)
    _, text = _scrape(sink.port)
    events.close()
    said = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert [e["parts_done"] for e in said] == [1, 4]  # throttled in between
    first = said[0]
    assert (
        first["bytes_total"] == 100 << 20 and first["rate"] > 0 and 4 <= first["eta"] <= 8
    )  # 25 MiB in ~2 s
    assert said[-1]["eta"] == 0.0 and said[-1]["bytes_done"] == 100 << 20
    assert (
        "cohort_checkpoint_fetched_bytes 104857600.0" in text
        and "cohort_checkpoint_eta_seconds 0.0" in text
    )
    assert "ETA" in progress.line()


def test_points_take_numbers_only():
    assert points("trained", {"step": 4, "loss": True, "seconds": "x", "tokens_per_sec": 10}) == [
        points("trained", {"step": 4, "tokens_per_sec": 10})[0]
    ]
    assert points("unknown", {"loss": 1.0}) == []
