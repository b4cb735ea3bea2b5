"""The JSON API over a run indexed from a real localnet: each endpoint's shape, 404/400 as JSON, security
headers; and chart downsampling at 100k steps."""

from __future__ import annotations

from urllib.parse import quote

import httpx2
from support.scripted_run import convict_by_checks, start_epoch

from cohort.sdk.explorer.api import metrics as metrics_answer
from cohort.sdk.explorer.indexer import IndexerStatus
from cohort.sdk.explorer.store import Store

RUN_KEYS = {"address", "program", "run_id", "name", "phase", "halted", "closed", "pending_pause",
            "epoch", "step", "total_steps", "clients", "pending_joins", "latest_loss", "last_activity"}  # fmt: skip
INDEXER_KEYS = {"rpc_url", "rpc_ok", "error", "failing_since", "retry_in", "last_ok", "caught_up",
                "live", "transactions_indexed", "warning"}  # fmt: skip


async def test_every_endpoint_answers_in_its_documented_shape(chain, tmp_path):
    await chain.create_run("shaped")
    members = await chain.members()
    await chain.play("shaped", members)
    await start_epoch(chain.client, "shaped", members)  # the second epoch is in its first round
    async with (
        chain.explorer(tmp_path / "x.sqlite") as ex,
        httpx2.AsyncClient(base_url=ex.url, timeout=10) as http,
    ):  # fmt: skip
        await chain.caught_up(ex)
        runs = (await http.get("/api/runs")).json()
        assert set(runs) == {"runs", "indexer"} and set(runs["indexer"]) == INDEXER_KEYS
        (run,) = runs["runs"]
        assert set(run) == RUN_KEYS
        assert run["run_id"] == "shaped" and run["phase"] == "RoundTrain" and run["clients"] == 3
        assert run["epoch"] == 1 and run["latest_loss"] is not None

        for key in ("shaped", run["address"]):
            detail = (await http.get(f"/api/runs/{key}")).json()
            assert detail["address"] == run["address"]
        assert set(detail) == {"address", "program", "run_id", "closed", "state", "links", "timeline",
                               "recent_rounds", "transactions", "verification", "indexer"}  # fmt: skip
        assert detail["verification"] == {"checks_failed": 0, "disputes_opened": 0, "convictions": 0,
                                          "members": []}  # fmt: skip
        state = detail["state"]
        assert state["phase"] == "RoundTrain" and state["description"].startswith("A 20M-parameter")
        assert set(state["checkpoint"]) >= {"kind", "repo", "revision", "sha256", "step"}
        assert state["config"]["witness_nodes"] == 3 and state["model"]["preset"] == "llama-20m"
        assert [e["epoch"] for e in detail["timeline"]] == [0, 1]
        phases = [p["phase"] for p in detail["timeline"][0]["phases"]]
        assert phases[:3] == ["WaitingForMembers", "Warmup", "RoundTrain"] and "Cooldown" in phases
        # the scripted epoch: step 1 trains, step 2 is its flush; a strict majority (2 of 3 seats) reports each
        assert [r["step"] for r in detail["recent_rounds"]] == [2, 1]
        assert all(len(r["witnesses"]) == 2 for r in detail["recent_rounds"])
        custom = "?cluster=custom&customUrl=" + quote(chain.net.http_url, safe="")
        tx = detail["transactions"][0]
        assert tx["explorer_url"] == f"https://explorer.solana.com/tx/{tx['signature']}{custom}"
        assert {"signature", "slot", "block_time", "err", "instructions"} <= set(tx)
        assert any("witness" in t["instructions"] for t in detail["transactions"])
        assert detail["links"]["checkpoint"] == "https://huggingface.co/cohort/llama-20m"
        assert detail["links"]["data_location"] is None  # "kjv" is not a URL

        m = (await http.get("/api/runs/shaped/metrics")).json()
        assert (m["from"], m["to"], m["bucket"]) == (1, 2, 1)
        assert [p["step"] for p in m["points"]] == [1, 2]
        assert set(m["points"][0]) == {"step", "loss", "loss_min", "loss_max", "tokens_per_sec",
                                       "bytes_sent", "bytes_received", "witnesses"}  # fmt: skip
        assert m["points"][0]["loss"] > m["points"][1]["loss"]  # the scripted loss falls
        window = (await http.get("/api/runs/shaped/metrics?from=2&to=3")).json()
        assert [p["step"] for p in window["points"]] == [2]
        one = (await http.get("/api/runs/shaped/metrics?points=1")).json()
        assert one["bucket"] == 2 and len(one["points"]) == 1 and one["points"][0]["witnesses"] == 4

        clients = (await http.get("/api/runs/shaped/clients")).json()
        assert clients["phase"] == "RoundTrain" and len(clients["clients"]) == 3
        assert {c["role"] for c in clients["clients"]} <= {"witness", "trainer", "-"}
        assert (
            sum(c["role"] == "witness" for c in clients["clients"]) == 3
        )  # three seats, three clients
        # one delivered round (the flush round's decision; the first round's attests the step before the
        # epoch) at the median member's share (4 quarters)
        assert all(c["points"] == 4 and c["health"] == "Healthy" for c in clients["clients"])

        page = (await http.get("/api/runs/shaped/events?limit=5")).json()
        assert len(page["events"]) == 5 and page["next_before"] == page["events"][-1]["id"]
        older = (
            await http.get(f"/api/runs/shaped/events?limit=5&before={page['next_before']}")
        ).json()
        assert older["events"][0]["id"] < page["events"][-1]["id"]
        joined = (await http.get("/api/runs/shaped/events?name=ClientJoined&limit=100")).json()
        assert len(joined["events"]) == 6 and all(
            e["data"]["run"] == run["address"] for e in joined["events"]
        )


async def test_errors_are_json_and_pages_carry_a_strict_policy(chain, tmp_path):
    async with (
        chain.explorer(tmp_path / "x.sqlite", live=False) as ex,
        httpx2.AsyncClient(base_url=ex.url, timeout=10) as http,
    ):  # fmt: skip
        for path in ("/api/runs/no-such-run", "/api/runs/no-such-run/metrics",
                     "/api/runs/no-such-run/clients", "/api/runs/no-such-run/events"):  # fmt: skip
            r = await http.get(path)
            assert r.status_code == 404 and r.json() == {"error": "no run 'no-such-run' is indexed"}
        r = await http.get("/api/nothing/here")
        assert r.status_code == 404 and "error" in r.json()
        r = await http.post("/api/runs")
        assert r.status_code in (404, 405) and "error" in r.json()
        await chain.create_run("queried")
        await chain.caught_up(ex)
        for query in ("from=x", "points=0", "points=99999", "from=3&to=1"):
            r = await http.get(f"/api/runs/queried/metrics?{query}")
            assert r.status_code == 400 and r.json()["error"], query
        r = await http.get("/api/runs/queried/events?limit=-1")
        assert r.status_code == 400
        page = await http.get("/runs/queried")
        csp = page.headers["Content-Security-Policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp
        assert page.headers["X-Content-Type-Options"] == "nosniff"
        assert (await http.get("/static/..%2Fstore.py")).status_code == 404
        assert (await http.get("/static/nope.js")).status_code == 404
        rebound = await http.get("/api/runs", headers={"Host": "attacker.example"})
        assert rebound.status_code == 421 and "Host" in rebound.json()["error"]
        assert (await http.get("/api/runs", headers={"Host": "localhost:1234"})).status_code == 200


def test_a_chart_of_100k_steps_is_served_as_a_readable_1000_points(tmp_path):
    store = Store(tmp_path / "big.sqlite")
    rows = [(i, "run", i + 1, "w", 0, 10.0 - i * 1e-4, 1000.0, 5, 6, None) for i in range(100_000)]
    store.db.executemany("INSERT INTO witnesses VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    store.db.execute("INSERT INTO runs VALUES ('run', 'p', 'big', '{}', 0, 0)")
    answer = metrics_answer(store, IndexerStatus("x"), "big", {})
    points = answer["points"]
    assert answer["bucket"] == 100 and len(points) == 1000
    assert [p["step"] for p in points] == list(range(1, 100_001, 100))
    assert all(p["witnesses"] == 100 for p in points)
    assert points[0]["loss_max"] == 10.0 and points[0]["loss"] < points[0]["loss_max"]
    zoom = metrics_answer(store, IndexerStatus("x"), "big", {"from": "500", "to": "700"})
    assert zoom["bucket"] == 1 and len(zoom["points"]) == 201
    store.close()


def test_the_command_reports_bad_input_in_one_line(tmp_path):
    import socket
    import subprocess
    import sys

    def cohort(*args: str) -> subprocess.CompletedProcess:
        command = [sys.executable, "-c", "from cohort.sdk.cli import main; main()", "explorer",
                   "--cluster", "http://127.0.0.1:9", "--program-id", "11111111111111111111111111111111", *args]  # fmt: skip
        return subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=tmp_path)

    (tmp_path / "junk.sqlite").write_text("not a database")
    result = cohort("--db", str(tmp_path / "junk.sqlite"), "--port", "0")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"Error: {tmp_path / 'junk.sqlite'} is not an explorer database (file is not a database)"
    ]
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = cohort("--db", str(tmp_path / "ok.sqlite"), "--port", str(port))
    assert result.returncode == 1
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"Error: cannot listen on 127.0.0.1:{port}")
    result = cohort("--also-program", "not-a-key", "--db", str(tmp_path / "ok.sqlite"))
    assert (
        result.returncode == 1
        and result.stderr.strip() == "Error: program id 'not-a-key' is not a base58 address"
    )


async def test_each_members_checks_disputes_and_convictions(chain, tmp_path):
    """A run whose every step is checked: two verifiers fail a trainer's step (CheckFailed twice, the second
    opens a dispute), its committee convicts it (DisputeClosed Convicted, ClientConvicted FailedVerification).
    The run's answer lists that member's history from the stored events, and the state the chain holds now."""
    await chain.create_run("checked", config={"verification_percent": 100})
    members = await chain.members()
    await start_epoch(chain.client, "checked", members)
    facts = await convict_by_checks(chain.client, "checked", members)
    step, trainer = facts["step"], facts["trainer"]
    wallets = {i: str(k.pubkey()) for i, k in facts["wallets"].items()}
    async with (
        chain.explorer(tmp_path / "x.sqlite") as ex,
        httpx2.AsyncClient(base_url=ex.url, timeout=10) as http,
    ):  # fmt: skip
        await chain.caught_up(ex)
        detail = (await http.get("/api/runs/checked")).json()
    v = detail["verification"]
    assert (v["checks_failed"], v["disputes_opened"], v["convictions"]) == (2, 1, 1)
    (member,) = v["members"]
    assert (member["epoch"], member["index"], member["wallet"]) == (0, trainer, wallets[trainer])
    first, second = (wallets[i] for i in facts["verifiers"])
    # the two reports of the check, then the committee's two (reports go to the open dispute: no CheckFailed)
    assert [(c["step"], c["verifier"], c["reason"], c["reports"]) for c in member["failed_checks"]] == [
        (step, first, "PayloadMismatch", 1), (step, second, "StateNotDelivered", 2)]  # fmt: skip
    assert all(c["signature"] and c["block_time"] for c in member["failed_checks"])
    (dispute,) = member["disputes"]
    assert (dispute["step"], dispute["outcome"], dispute["fails"], dispute["passes"]) == (
        step, "Convicted", 2, 0)  # fmt: skip
    assert dispute["committee"] == 2 and dispute["seed_step"] > step and dispute["opened_at"]
    (conviction,) = member["convictions"]
    assert (conviction["step"], conviction["reason"]) == (step, "FailedVerification")
    # and the chain's picture now, in the state: convicted and banned, nothing open
    now = detail["state"]["verification"]
    assert (now["open_checks"], now["open_disputes"]) == (0, 0)
    assert now["banned"] == [{"wallet": wallets[trainer], "banned_until": 5}]
    (row,) = [m for m in now["members"] if m["index"] == trainer]
    assert row["convicted"] and row["banned_until"] == 5
