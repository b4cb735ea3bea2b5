"""Deploying to a public cluster: rate limits (HTTP 429 + Retry-After) are waited out and slow the writes
down, buffers of abandoned deploys are refunded, and a dry run prices the deploy before anything is sent.
The cluster is the localnet, seen through a real HTTP proxy that plays the public RPC's rate limiter."""

from __future__ import annotations

import asyncio
import threading
import time
from email.utils import formatdate
from pathlib import Path

import httpx2
import pytest
from aiohttp import web
from solders.keypair import Keypair

from cohort.sbf import build
from cohort.sdk import loader_v3
from cohort.sdk.deploy import buffer_keypair_path, deploy_program, plan_deploy_cost
from cohort.sdk.rpc import Rpc, retry_after
from cohort.sdk.wallet import load_keypair


def too_many(seconds: str) -> web.Response:
    return web.Response(status=429, text="slow down", headers={"Retry-After": seconds})


def funded(workspace, name: str, sol: float = 20) -> tuple[Path, Keypair]:
    path = workspace.new_wallet(name, sol)
    return path, load_keypair(path)


def balance(workspace, keypair: Keypair) -> int:
    return workspace.localnet.rpc("getBalance", str(keypair.pubkey()))["value"]


def account(workspace, address) -> dict | None:
    return workspace.localnet.rpc("getAccountInfo", str(address), {"encoding": "base64"})["value"]


class Interrupted(Exception):
    pass


def interrupt_deploy(workspace, payer: Keypair, elf: bytes, keypair: Path) -> None:
    """Start a deploy and stop it a third of the way through its writes (the buffer stays behind)."""

    def stop_after_some(done: int, total: int) -> None:
        if done >= total // 3:
            raise Interrupted

    async def main() -> None:
        async with Rpc(workspace.localnet.net.http_url) as rpc:
            with pytest.raises(Interrupted):
                await deploy_program(
                    rpc, payer, elf, keypair, progress=stop_after_some, concurrency=4
                )

    asyncio.run(main())


def test_retry_after_is_waited_out_without_using_up_retries(workspace, rpc_proxy):
    proxy = rpc_proxy(lambda method, n: too_many("1") if n < 2 else None)

    async def main() -> tuple[int, int]:
        async with Rpc(proxy.url, retries=1, backoff=0.01) as rpc:
            return await rpc.balance(workspace.wallet.pubkey()), rpc.throttled

    started = time.monotonic()
    lamports, throttled = asyncio.run(main())
    assert lamports > 0 and throttled == 2 and proxy.answered == [429, 429]
    assert time.monotonic() - started >= 2.0  # one second each, as asked


def test_retry_after_as_an_http_date():
    now = time.time()
    response = httpx2.Response(429, headers={"Retry-After": formatdate(now + 30, usegmt=True)},
                               request=httpx2.Request("POST", "http://x"))  # fmt: skip
    error = httpx2.HTTPStatusError("429", request=response.request, response=response)
    assert 28 <= retry_after(error, now) <= 31


def test_a_rate_limit_longer_than_the_budget_is_one_line(workspace, helpers, rpc_proxy):
    proxy = rpc_proxy(lambda method, n: too_many("3600"))
    line = helpers.one_error_line(workspace.cli("wallet", "balance", "--cluster", proxy.url))
    assert f"cannot reach the RPC at {proxy.url}" in line and "rate-limited (HTTP 429)" in line


def test_deploy_slows_down_to_the_clusters_rate_limit(workspace, rpc_proxy, tmp_path: Path):
    """At most 3 sendTransaction per 0.25 s; more gets 429 with Retry-After: 1."""
    lock, sent = threading.Lock(), []

    def limiter(method: str, n: int) -> web.Response | None:
        if method != "sendTransaction":
            return None
        with lock:
            now = time.monotonic()
            sent[:] = [t for t in sent if now - t < 0.25]
            if len(sent) >= 3:
                return too_many("1")
            sent.append(now)
        return None

    proxy = rpc_proxy(limiter)
    _, payer = funded(workspace, "rate-limited-deployer")
    keypair = tmp_path / "throttled-keypair.json"
    (probe,) = build.build_all(["toolchain_probe"], log=lambda _: None)

    async def main():
        async with Rpc(proxy.url, retries=1) as rpc:  # 429s do not use up retries
            return await deploy_program(rpc, payer, probe.so_path.read_bytes(), keypair,
                                        concurrency=16)  # fmt: skip

    result = asyncio.run(main())
    assert result.throttled >= 1 and result.lowest_concurrency < 16, result
    assert result.lowest_rate is not None and result.lowest_rate > 0
    assert 429 in proxy.answered
    program = workspace.localnet.rpc("getAccountInfo", str(result.program_id),
                                     {"encoding": "jsonParsed"})["value"]  # fmt: skip
    assert program["executable"] is True


def test_dry_run_prices_the_deploy_exactly_and_sends_nothing(
    workspace, rpc_proxy, coordinator_elf: bytes, tmp_path: Path
):
    wallet, payer = funded(workspace, "dry-runner")
    keypair = tmp_path / "priced-keypair.json"
    proxy = rpc_proxy(lambda method, n: None)
    result = workspace.cli("deploy", "--dry-run", "--no-build", "--cluster", proxy.url, "-k",
                           str(wallet), "--program-keypair", str(keypair))  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "dry run, nothing sent" in result.output and "buffer rent" in result.output
    assert "program data rent" in result.output and "(enough)" in result.output
    assert not {"sendTransaction", "requestAirdrop"} & set(proxy.seen), proxy.seen
    assert not keypair.exists()  # not even a keypair is created

    async def priced_then_deployed():
        async with Rpc(workspace.localnet.net.http_url) as rpc:
            cost = await plan_deploy_cost(rpc, payer.pubkey(), coordinator_elf, keypair)
            before = await rpc.balance(payer.pubkey())
            await deploy_program(rpc, payer, coordinator_elf, keypair)
            return cost, before - await rpc.balance(payer.pubkey())

    cost, spent = asyncio.run(priced_then_deployed())
    assert spent == cost.spent  # the dry run's figure, to the lamport
    assert cost.needed > cost.spent  # the buffer's rent is needed up front but comes back


def test_a_buffer_of_another_elf_is_closed_and_refunded(
    workspace, coordinator_elf: bytes, tmp_path: Path
):
    _, payer = funded(workspace, "changed-elf")
    keypair = tmp_path / "changing-keypair.json"
    interrupt_deploy(workspace, payer, coordinator_elf, keypair)
    stale = load_keypair(buffer_keypair_path(keypair)).pubkey()
    stale_lamports = account(workspace, stale)["lamports"]
    (probe,) = build.build_all(["toolchain_probe"], log=lambda _: None)
    other_elf = probe.so_path.read_bytes()
    assert len(other_elf) != len(coordinator_elf)

    async def deploy_other():
        async with Rpc(workspace.localnet.net.http_url) as rpc:
            return await deploy_program(rpc, payer, other_elf, keypair)

    result = asyncio.run(deploy_other())
    assert result.refunded == stale_lamports > 0
    assert account(workspace, stale) is None  # closed, not stranded


def test_close_buffers_refunds_every_abandoned_buffer(
    workspace, helpers, coordinator_elf: bytes, tmp_path: Path
):
    wallet, payer = funded(workspace, "abandoner")
    for name in ("first", "second"):
        interrupt_deploy(workspace, payer, coordinator_elf, tmp_path / f"{name}-keypair.json")
    buffers = [load_keypair(buffer_keypair_path(tmp_path / f"{n}-keypair.json")).pubkey()
               for n in ("first", "second")]  # fmt: skip
    held = sum(account(workspace, b)["lamports"] for b in buffers)
    before = balance(workspace, payer)
    result = workspace.cli("deploy", "--close-buffers", "-k", str(wallet))
    assert result.exit_code == 0, result.output
    assert "closed 2 buffer(s)" in result.output
    assert all(account(workspace, b) is None for b in buffers)
    assert balance(workspace, payer) == before + held - 2 * 5_000
    again = workspace.cli("deploy", "--close-buffers", "-k", str(wallet))
    assert "closed 0 buffer(s)" in again.output


def test_adaptive_limit_halves_once_per_burst_and_grows_back():
    from cohort.sdk.pacing import AdaptiveLimit

    now = [0.0]
    limit = AdaptiveLimit(16, cooldown=1.0, clock=lambda: now[0])
    for _ in range(10):  # one burst answered 429 together: one decrease
        limit.throttled()
    assert (limit.limit, limit.lowest, limit.throttles) == (8, 8, 10)
    now[0] = 1.5
    limit.throttled()
    assert limit.limit == 4
    for _ in range(4 + 5):  # a window's worth of successes adds one, then the next window's
        limit.succeeded()
    assert limit.limit == 6 and limit.lowest == 4
    for _ in range(1000):
        limit.succeeded()
    assert limit.limit == 16  # never above where it started


def test_the_first_429_paces_requests_at_half_the_rate_just_sent():
    from cohort.sdk.pacing import GROWTH, AdaptiveLimit

    now = [0.0]
    limit = AdaptiveLimit(8, cooldown=1.0, clock=lambda: now[0])
    for k in range(40):  # 40 requests in the last second, unpaced
        now[0] = k / 40
        assert limit.delay() == 0
    limit.throttled()
    assert limit.rate == 20  # half of 40/s
    first, second = limit.delay(), limit.delay()
    assert first == 0 and abs(second - 1 / 20) < 1e-9  # starts now spaced 50 ms apart
    now[0] += 2
    limit.throttled()
    assert limit.rate == 10 and limit.lowest_rate == 10
    for _ in range(10):
        limit.request_done()
    assert abs(limit.rate - (10 + 10 * GROWTH)) < 1e-9


def test_a_deploy_cut_off_part_way_says_how_to_resume_or_refund(
    workspace, helpers, rpc_proxy, tmp_path
):
    sends = [0]

    def dies_after_some_writes(method: str, n: int) -> web.Response | None:
        if method == "sendTransaction":
            sends[0] += 1
            if sends[0] > 10:
                return web.Response(status=503, text="down")
        return None

    proxy = rpc_proxy(dies_after_some_writes)
    wallet, _ = funded(workspace, "cut-off-deployer")
    keypair = tmp_path / "cut-off-keypair.json"
    line = helpers.one_error_line(workspace.cli(
        "deploy", "--no-build", "--cluster", proxy.url, "-k", str(wallet), "--program-keypair",
        str(keypair), "--concurrency", "2",
    ))  # fmt: skip
    assert "cannot reach the RPC" in line and "run the same deploy again to resume" in line
    assert "cohort deploy --close-buffers" in line
    buffer = load_keypair(buffer_keypair_path(keypair)).pubkey()
    assert account(workspace, buffer) is not None  # kept, and refundable:
    result = workspace.cli("deploy", "--close-buffers", "-k", str(wallet))
    assert result.exit_code == 0 and "closed 1 buffer(s)" in result.output, result.output
    assert account(workspace, buffer) is None


def test_writes_the_cluster_dropped_are_sent_again(
    workspace, rpc_proxy, monkeypatch, tmp_path: Path
):
    """The RPC accepts the 3rd, 6th and 9th transaction (writes: the 1st creates the buffer) but never
    forwards them, as a busy public RPC may drop them."""
    from solders.signature import Signature

    from cohort.sdk import deploy

    monkeypatch.setattr(deploy, "LANDING_WAIT", 0.5)
    count = [0]

    def drops_some(method: str, n: int) -> web.Response | None:
        if method != "sendTransaction":
            return None
        count[0] += 1
        if count[0] % 3 or count[0] > 9:
            return None
        body = {"jsonrpc": "2.0", "id": 0, "result": str(Signature.default())}
        return web.json_response(body)

    proxy = rpc_proxy(drops_some)
    _, payer = funded(workspace, "dropped-writes")
    (probe,) = build.build_all(["toolchain_probe"], log=lambda _: None)
    elf = probe.so_path.read_bytes()

    async def main():
        async with Rpc(proxy.url) as rpc:
            return await deploy_program(rpc, payer, elf, tmp_path / "dropped-keypair.json")

    result = asyncio.run(main())
    writes = -(-len(elf) // loader_v3.max_write_chunk(payer.pubkey(), payer.pubkey()))
    assert writes > 9 and result.writes_sent == writes + 3  # the dropped ones went again
    program = workspace.localnet.rpc("getAccountInfo", str(result.program_id),
                                     {"encoding": "jsonParsed"})["value"]  # fmt: skip
    assert program["executable"] is True
