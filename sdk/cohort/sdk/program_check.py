"""Right answers before any run command: is the RPC there, and is the program id cohort's coordinator?

A mistyped URL must read "cannot reach", not "no program id"; a program id that names something else (a
wallet, a run, another program) must say so, not list "no runs". The coordinator check reads the program
account and its program data in one getMultipleAccounts call: the account must be executable, and its code
must carry the coordinator's proof prefixes (the IDL's JOIN_PROOF_PREFIX and RESULT_PROOF_PREFIX, the bytes
members sign their joins and results under). A program without them cannot verify cohort's members, whatever
it is; a coordinator without runs still passes, since the check reads the code, not the runs.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from solders.pubkey import Pubkey

from .config import Cluster
from .errors import ConfigError
from .idl import Idl
from .loader_v3 import LOADER_V3, programdata_address
from .rpc import Rpc

_MARKERS = ("JOIN_PROOF_PREFIX", "RESULT_PROOF_PREFIX")
_PROGRAMDATA_HEADER = 45  # u32 tag 3 | u64 slot | Option<Pubkey> upgrade authority


@dataclass(frozen=True)
class Probe:
    """An RPC that answered: its URL, its software version, and how long getVersion took."""

    url: str
    version: str
    seconds: float


async def probe_rpc(rpc: Rpc) -> Probe:
    """getVersion against the cluster; RpcUnavailable ("cannot reach the RPC at URL (why)") or RpcRefused
    when nothing answers JSON-RPC there."""
    start = time.perf_counter()
    answer = await rpc.call("getVersion", lambda c: c.get_version())
    return Probe(rpc.url, str(answer.value.solana_core), time.perf_counter() - start)


def probe_now(urls: tuple[str, ...]) -> Probe:
    """probe_rpc from synchronous code, on a loop of its own in a worker thread (so it works whether or not
    the caller's thread runs an event loop)."""

    async def once() -> Probe:
        async with Rpc(urls) as rpc:
            return await probe_rpc(rpc)

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, once()).result()


def coordinator_markers(idl: Idl) -> list[bytes]:
    """The byte strings every build of the coordinator's code carries (the proof prefixes of its IDL)."""
    values = {c["name"]: c["value"] for c in idl.raw.get("constants", [])}
    out = []
    for name in _MARKERS:
        text = values.get(name)
        if text is None:
            raise ConfigError(f"the coordinator IDL has no constant {name}")
        out.append(bytes(int(b) for b in text.strip("[]").split(",")))
    return out


async def check_coordinator(rpc: Rpc, program_id: Pubkey, cluster: Cluster, idl: Idl) -> None:
    """ConfigError unless `program_id` on this cluster is an executable program holding the coordinator."""
    programdata = programdata_address(program_id)
    answer = await rpc.call(
        "getMultipleAccounts",
        lambda c: c.get_multiple_accounts([program_id, programdata], encoding="base64"),
    )
    program, data = [*answer.value, None, None][:2]
    where = f"{cluster.name} ({cluster.url})" if cluster.name != cluster.url else cluster.url
    if program is None:
        raise ConfigError(f"no program {program_id} on {where}: run `cohort deploy --cluster {cluster.name}` "
                          "first (or pass the coordinator's --program-id)")  # fmt: skip
    if not program.executable:
        raise ConfigError(f"{program_id} on {where} is not a program (an account owned by {program.owner}): "
                          "--program-id must name the coordinator program")  # fmt: skip
    # loader v3 keeps the code in the program data account; older loaders in the program account itself
    if program.owner == LOADER_V3 and (data is None or len(data.data) <= _PROGRAMDATA_HEADER):
        raise ConfigError(f"program {program_id} on {where} has no code (closed, or its deploy did not "
                          "finish): check --program-id")  # fmt: skip
    code = bytes(program.data) + (
        bytes(data.data) if data is not None and data.owner == LOADER_V3 else b""
    )
    if not all(marker in code for marker in coordinator_markers(idl)):
        raise ConfigError(f"program {program_id} on {where} is not cohort's coordinator (its code lacks the "
                          "coordinator's proof prefixes): check --program-id")  # fmt: skip
