"""Following the chain against bad RPC answers: one empty answer is not the end of a run, a truncated
account does not stop the client's follower, and a websocket that accepts a subscription and then stalls
does not freeze the state (the follower polls). The RPC is stubbed here (the boundary these tests are not
about is the network); the Run bytes are real (the coordinator's host build)."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

from aiohttp import web
from support.host_run import HostRun

from cohort.client.runtime.loop import Client
from cohort.client.runtime.machine import ChainUpdate
from cohort.sdk.client import RunClient, _Follower
from cohort.sdk.coordinator_core import CoordinatorCore
from cohort.sdk.idl import IdlError


class StubRpc:
    """Answers getAccountInfo from a script: None (no account), bytes, or an exception to raise."""

    def __init__(self, program, answers) -> None:
        self.program, self.answers, self.url, self.idl, self.commitment = (
            program,
            list(answers),
            "stub://rpc",
            None,
            "confirmed",
        )
        self.reads = 0

    async def account_owner_and_data(self, address):
        self.reads += 1
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return None if answer is None else (self.program, answer)

    async def account_slice(self, address, offset, length):
        found = await self.account_owner_and_data(address)
        return None if found is None else (found[0], found[1][offset : offset + length])


def run_bytes(core: CoordinatorCore, host: HostRun) -> bytes:
    return core.idl.accounts["Run"] + bytes(host.state)


async def test_one_empty_answer_is_not_a_closed_run(monkeypatch):
    monkeypatch.setattr("cohort.sdk.client.asyncio.sleep", _no_sleep)
    core = CoordinatorCore()
    host = HostRun(core)
    chain = RunClient(
        StubRpc(host.address, [None, run_bytes(core, host)]), host.address, idl=core.idl
    )  # type: ignore[arg-type]
    state = await _Follower(chain, host.address, hot=False).poll()
    assert state.run_id == "host-run"  # a lagging node's empty answer was read again
    closed = RunClient(StubRpc(host.address, [None]), host.address, idl=core.idl)  # type: ignore[arg-type]
    follower = _Follower(closed, host.address, hot=False)
    assert (
        await follower.poll() is not None and closed.rpc.reads == 3
    )  # closed: three answers agree


async def _no_sleep(_seconds: float) -> None:
    return None


async def test_the_follower_survives_a_truncated_account_and_keeps_following():
    core = CoordinatorCore()
    host = HostRun(core)
    good = host.run()
    events: list[tuple[str, dict]] = []
    client = Client.__new__(Client)
    client.inbox = asyncio.Queue()
    client.events = SimpleNamespace(
        emit=lambda name, **f: events.append((name, f)), status=lambda **_: None
    )
    client.core, client.run_address, client.latest, client._shown = core, host.address, None, None
    client.wallet = SimpleNamespace(pubkey=lambda: host.wallets[0])
    calls = {"n": 0}

    async def watch(*_args, **_kwargs):
        calls["n"] += 1
        if calls["n"] == 1:
            raise IdlError(
                "Run: data ends at byte 59000 of 59568"
            )  # what a truncated account decodes to
        yield good
        await asyncio.sleep(3600)

    client.chain = SimpleNamespace(watch=watch)
    client.rpc = SimpleNamespace(url="stub://rpc")
    task = asyncio.ensure_future(client._follow())
    event = await asyncio.wait_for(client.inbox.get(), 5)
    task.cancel()
    assert isinstance(event, ChainUpdate) and event.view.run.nonce == good.nonce
    assert next(name for name, _ in events) == "follower_restarted"


async def test_a_websocket_that_stalls_does_not_freeze_the_state():
    core = CoordinatorCore()
    host = HostRun(core)
    answers = [run_bytes(core, host)]
    host.join_all()
    later = bytearray(
        run_bytes(core, host)
    )  # a later state: the program bumps the nonce, the core does not
    at = 8 + core.idl.offset_of("Run", "nonce")
    later[at : at + 8] = (5).to_bytes(8, "little")
    answers.append(bytes(later))

    async def stalling(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        async for message in ws:  # answer the subscription, then never notify
            request_id = json.loads(message.data)["id"]
            await ws.send_str(json.dumps({"jsonrpc": "2.0", "result": 7, "id": request_id}))
        return ws

    app = web.Application()
    app.router.add_get("/", stalling)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    rpc = StubRpc(host.address, answers)
    chain = RunClient(rpc, host.address, ws_url=f"ws://127.0.0.1:{port}", idl=core.idl)  # type: ignore[arg-type]
    states = []
    following = chain.watch(host.address, poll_interval=0.05)
    try:

        async def follow() -> None:
            async for state in following:
                states.append(state)
                if len(states) == 2:
                    return

        await asyncio.wait_for(follow(), 10)
    finally:
        await following.aclose()  # closes its websocket
        await runner.cleanup()
    assert states[1].nonce > states[0].nonce  # the change came by polling the quiet socket


async def test_notifications_older_than_the_view_cost_no_read():
    """Over a slow link the websocket queues notifications behind a full read; outside a round each fresh one
    needs a full read (~60 KB), and a stale one (its nonce not newer than what was yielded) must cost none, or
    the backlog grows and the view falls seconds behind the chain."""
    core = CoordinatorCore()
    host = HostRun(core)
    data = bytearray(run_bytes(core, host))
    at = 8 + core.idl.offset_of("Run", "nonce")
    data[at : at + 8] = (5).to_bytes(8, "little")  # the program bumps the nonce, the core does not
    rpc = StubRpc(host.address, [bytes(data)])
    chain = RunClient(rpc, host.address, idl=core.idl)  # type: ignore[arg-type]
    follower = _Follower(chain, host.address, hot=True)
    state = await follower.poll()
    assert follower.fresh(state) and rpc.reads == 1

    def note(nonce: int) -> SimpleNamespace:
        data[at : at + 8] = nonce.to_bytes(8, "little")
        value = SimpleNamespace(data=bytes(data[: follower.length]), lamports=1)
        return SimpleNamespace(result=SimpleNamespace(value=value))

    for nonce in (state.nonce, state.nonce - 1):  # stale: what was yielded, and older
        assert await follower.from_notification(note(nonce)) is None
    assert rpc.reads == 1
    newer = await follower.from_notification(note(state.nonce + 1))  # not a round: the rest is read
    assert rpc.reads == 2 and newer is not None


async def test_a_read_that_stalls_is_asked_again(monkeypatch):
    """One connection's loss recovery can hold a read for the RPC client's whole timeout (15 s); the follower
    asks again after READ_DEADLINE instead of leaving the member's view that far behind."""
    monkeypatch.setattr("cohort.sdk.client.READ_DEADLINE", 0.05)
    core = CoordinatorCore()
    host = HostRun(core)

    class Stalling(StubRpc):
        async def account_owner_and_data(self, address):
            if self.reads == 0:
                self.reads += 1
                await asyncio.sleep(3600)
            return await super().account_owner_and_data(address)

    rpc = Stalling(host.address, [run_bytes(core, host)])
    chain = RunClient(rpc, host.address, idl=core.idl)  # type: ignore[arg-type]
    state = await asyncio.wait_for(_Follower(chain, host.address, hot=False).poll(), 5)
    assert state.run_id == "host-run" and rpc.reads == 2


def test_a_dispute_seed_revealed_after_a_read_made_while_a_round_waited_for_its_seed_needs_the_rest():
    """A dispute opened in the round of step 6 draws its committee from the seed of the round of step 9,
    revealed when the round of step 8 starts. A full read made between the rounds of steps 7 and 8 (the round
    of step 8 waiting for its seed, `seed_pending`, progress at 8) lacks it: the next hot prefix, the round of
    step 8 started, must read the rest again, or the committee goes unseen until the member list next moves
    (seen: the committee learned of a dispute five seconds late, when the step's weights were gone)."""
    from dataclasses import replace

    from cohort.sdk.client import rest_is_stale
    from cohort.sdk.models import Progress, RunState

    core = CoordinatorCore()
    base = HostRun(core).run()

    def at(step: int, pending: bool, **more) -> object:
        return replace(base, state=RunState.RoundTrain, progress=Progress(0, step, 0), seed_pending=pending,
                       disputes=((2, 3, 9),), **more)  # fmt: skip

    full = at(8, True)
    assert full.newest_seed_step == 8 and at(8, False).newest_seed_step == 9
    assert not rest_is_stale(full, at(8, True))  # still waiting: nothing new
    assert rest_is_stale(
        full, at(8, False)
    )  # the round of step 8 started: the seed of step 9 is out
    assert not rest_is_stale(at(8, False), at(9, False))  # read with it: no read again
    assert rest_is_stale(full, at(8, False, members_nonce=base.members_nonce + 1))
