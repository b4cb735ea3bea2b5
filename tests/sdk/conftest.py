"""Fixtures of the SDK tests: one localnet for the session (in a thread, so synchronous CLI invocations and
async SDK calls both reach it over real sockets), a workspace whose Anchorfile points at it, a funded
wallet, and the coordinator deployed through `cohort deploy`."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import httpx2
import pytest
from aiohttp import web
from click.testing import CliRunner, Result
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from cohort.localnet.config import LocalnetConfig
from cohort.localnet.server import Localnet
from cohort.sbf import build
from cohort.sdk.cli import cli
from cohort.sdk.coordinator_core import CoordinatorCore, load_idl
from cohort.sdk.run_config import packaged_config
from cohort.sdk.wallet import save_keypair

EXAMPLE = packaged_config("example-run.toml")


class LocalnetThread:
    """A localnet serving from its own event loop in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.net = Localnet(LocalnetConfig(port=0, cheats=True))  # tests warp time

    def __enter__(self) -> LocalnetThread:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.net.start(), self.loop).result(30)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.net.stop(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()

    def rpc(self, method: str, *params: object) -> object:
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": list(params)}
        reply = httpx2.post(self.net.http_url, json=body, timeout=10).json()
        assert "error" not in reply, reply
        return reply["result"]

    def airdrop(self, to: Pubkey, sol: float) -> None:
        self.rpc("requestAirdrop", str(to), int(sol * 10**9))

    def warp(self, seconds: int) -> None:
        self.rpc("localnet_warpTime", seconds)

    def transaction_count(self) -> int:
        return int(self.rpc("getTransactionCount"))  # type: ignore[arg-type]


# a proxy rule: (JSON-RPC method, how many requests the proxy saw before this one) -> a canned answer, or
# None to forward the request to the localnet
Rule = Callable[[str, int], web.Response | None]


@dataclass
class RpcProxy:
    """A real HTTP server in front of the localnet that answers some requests itself (429s, 5xx, junk)."""

    url: str
    seen: list[str] = field(default_factory=list)  # JSON-RPC methods, in arrival order
    answered: list[int] = field(
        default_factory=list
    )  # statuses the proxy gave instead of forwarding


def start_proxy(localnet: LocalnetThread, rule: Rule) -> tuple[RpcProxy, Callable[[], None]]:
    """Serve `rule` on 127.0.0.1 (random port) from the localnet's event loop; returns (proxy, stop)."""
    proxy = RpcProxy("")
    holder: dict[str, object] = {}

    async def handle(request: web.Request) -> web.Response:
        body = await request.read()
        try:
            method = str(json.loads(body).get("method"))
        except (ValueError, AttributeError):
            method = "?"
        count = len(proxy.seen)
        proxy.seen.append(method)
        canned = rule(method, count)
        if canned is not None:
            proxy.answered.append(canned.status)
            return canned
        session: aiohttp.ClientSession = holder["session"]  # type: ignore[assignment]
        async with session.post(localnet.net.http_url, data=body,
                                headers={"Content-Type": "application/json"}) as upstream:  # fmt: skip
            return web.Response(body=await upstream.read(), content_type="application/json")

    async def start() -> str:
        holder["session"] = aiohttp.ClientSession()
        app = web.Application()
        app.router.add_post("/", handle)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        holder["runner"] = runner
        return f"http://127.0.0.1:{runner.addresses[0][1]}"

    async def stop() -> None:
        await holder["session"].close()  # type: ignore[attr-defined]
        await holder["runner"].cleanup()  # type: ignore[attr-defined]

    proxy.url = asyncio.run_coroutine_threadsafe(start(), localnet.loop).result(10)
    return proxy, lambda: asyncio.run_coroutine_threadsafe(stop(), localnet.loop).result(10)


@pytest.fixture
def rpc_proxy(localnet: LocalnetThread) -> Iterator[Callable[[Rule], RpcProxy]]:
    """Start proxies with `rpc_proxy(rule)`; all are stopped when the test ends."""
    stops: list[Callable[[], None]] = []

    def make(rule: Rule) -> RpcProxy:
        proxy, stop = start_proxy(localnet, rule)
        stops.append(stop)
        return proxy

    yield make
    for stop in stops:
        stop()


@dataclass
class Workspace:
    """A folder with an Anchorfile for the session's localnet, a funded wallet, and the deployed program."""

    root: Path
    localnet: LocalnetThread
    wallet: Keypair
    program_id: Pubkey | None = None

    @property
    def anchorfile(self) -> Path:
        return self.root / "Anchorfile.toml"

    @property
    def program_keypair(self) -> Path:
        return self.root / "target" / "coordinator-keypair.json"

    def cli(self, *args: str, env: dict[str, str] | None = None) -> Result:
        """`cohort ARGS` in this workspace (its Anchorfile and wallet are the defaults)."""
        return CliRunner().invoke(
            cli, list(args), env={"COHORT_ANCHORFILE": str(self.anchorfile), **(env or {})}
        )

    def restore_default_program(self) -> None:
        """After a test deployed another program: the session's program is the default again."""
        from cohort.sdk.config import load_workspace, record_deployment

        assert self.program_id is not None
        record_deployment(load_workspace(self.anchorfile), "localnet", self.program_id)

    def new_wallet(self, name: str, sol: float = 0) -> Path:
        """A fresh funded wallet file in the session's workspace (names are shared by every test of the session:
        each test its own)."""
        path = self.root / f"{name}.json"
        if path.exists():
            raise AssertionError(
                f"wallet {name!r} is another test's in this session's workspace: pick another name"
            )
        keypair = Keypair()
        save_keypair(keypair, path)
        if sol:
            self.localnet.airdrop(keypair.pubkey(), sol)
        return path


class Helpers:
    """Test helpers (a fixture, since test modules cannot import conftest under importlib mode)."""

    EXAMPLE = EXAMPLE

    @staticmethod
    def one_error_line(result: Result) -> str:
        """The single `Error: ...` line a failed command printed (and nothing else)."""
        assert result.exit_code == 1, result.output
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
        return lines[0]

    @staticmethod
    def config_copy(folder: Path, run_id: str, **replace: str) -> Path:
        """The example config with another run id, and lines replaced ({old text: new text})."""
        text = EXAMPLE.read_text().replace('id = "example-kjv"', f'id = "{run_id}"')
        for old, new in replace.items():
            assert old in text, old
            text = text.replace(old, new)
        path = folder / f"{run_id}.toml"
        path.write_text(text)
        return path


@pytest.fixture(scope="session")
def helpers() -> type[Helpers]:
    return Helpers


@pytest.fixture(scope="session")
def coordinator_elf() -> bytes:
    (program,) = build.build_all(["coordinator"], log=lambda _: None)
    return program.so_path.read_bytes()


@pytest.fixture(scope="session")
def core(coordinator_elf) -> CoordinatorCore:
    return CoordinatorCore(idl=load_idl())


@pytest.fixture(scope="session")
def localnet() -> Iterator[LocalnetThread]:
    with LocalnetThread() as net:
        yield net


@pytest.fixture(scope="session")
def workspace(tmp_path_factory, localnet: LocalnetThread, coordinator_elf) -> Workspace:
    root = tmp_path_factory.mktemp("workspace")
    wallet = Keypair()
    save_keypair(wallet, root / "id.json")
    localnet.airdrop(wallet.pubkey(), 1000)
    (root / "Anchorfile.toml").write_text(
        "[provider]\n"
        'cluster = "localnet"\n'
        'wallet = "id.json"\n\n'
        "[clusters]\n"
        f'localnet = "{localnet.net.http_url}"\n\n'
        "[programs.localnet]\n"
    )
    ws = Workspace(root, localnet, wallet)
    result = ws.cli("deploy", "--program-keypair", str(ws.program_keypair))
    assert result.exit_code == 0, result.output
    ws.program_id = Pubkey.from_string(result.output.split("program id ")[1].split()[0])
    return ws
