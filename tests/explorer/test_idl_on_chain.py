"""The coordinator (and the treasurer: the handler is the SBF SDK's) answers Anchor's IDL instructions:
`cohort idl publish|fetch` on a real localnet, the program's checks (only the upgrade authority creates it, only its authority writes, at the derived
address, even when a stranger funded that address first), and the real @coral-xyz/anchor npm package: Program.fetchIdl returns our IDL and its coder decodes
a Run account and a witness instruction."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.system_program import TransferParams, transfer
from solders.transaction import VersionedTransaction

from cohort.sbf import build
from cohort.sdk import idl_account
from cohort.sdk.deploy import deploy_program
from cohort.sdk.errors import ProgramError
from cohort.sdk.explorer.indexer import Indexer
from cohort.sdk.explorer.store import Store
from cohort.sdk.rpc import Rpc
from cohort.sdk.treasurer import load_idl as load_treasurer_idl
from cohort.sdk.wallet import save_keypair

NPM_DIR = (
    Path(__file__).resolve().parents[2] / "build" / "npm-anchor"
)  # untracked, reused between runs
ANCHOR_PACKAGES = ("@coral-xyz/anchor@0.32.1", "@solana/web3.js@1.98.4")
CU_LIMIT = 200_000


async def compute_units(chain, signature) -> int:
    tx = await chain.rpc.raw_request("getTransaction", [str(signature), {"encoding": "json"}])
    return tx["meta"]["computeUnitsConsumed"]


async def cohort_cli(cwd: Path, *args: str) -> tuple[int, str]:
    """`cohort ARGS` in a subprocess: its exit code and its output."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "from cohort.sdk.cli import main; main()", *args, cwd=cwd,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(process.communicate(), 120)
    return process.returncode, out.decode()


async def test_publish_then_fetch_returns_the_idl(chain):
    idl = chain.core.idl.raw
    assert await idl_account.fetch(chain.rpc, chain.program_id) is None
    done = await idl_account.publish(chain.rpc, chain.authority, chain.program_id, idl)
    assert (
        not done.unchanged
        and done.writes >= 1
        and done.address == idl_account.idl_address(chain.program_id)
    )
    found = await idl_account.fetch(chain.rpc, chain.program_id)
    assert found.authority == chain.authority.pubkey()
    assert found.idl() == dict(idl, address=str(chain.program_id))
    again = await idl_account.publish(chain.rpc, chain.authority, chain.program_id, idl)
    assert again.unchanged and again.writes == 0
    changed = dict(idl, metadata=dict(idl["metadata"], description="a newer IDL"))
    replaced = await idl_account.publish(chain.rpc, chain.authority, chain.program_id, changed)
    assert replaced.replaced
    assert (await idl_account.fetch(chain.rpc, chain.program_id)).idl()["metadata"][
        "description"
    ] == "a newer IDL"


async def test_cohort_idl_publish_and_fetch_commands(chain, tmp_path):
    wallet = tmp_path / "authority.json"
    save_keypair(chain.authority, wallet)
    flags = [
        "--cluster",
        chain.net.http_url,
        "--program-id",
        str(chain.program_id),
        "--wallet",
        str(wallet),
    ]

    async def cohort(*args: str) -> tuple[int, str]:
        return await cohort_cli(tmp_path, *args)

    code, out = await cohort("idl", "fetch", *flags)
    assert (
        code == 1
        and out.strip()
        == f"Error: no IDL is published for {chain.program_id} (run `cohort idl publish`)"
    )
    code, out = await cohort("idl", "publish", *flags)
    assert code == 0 and "published the IDL" in out, out
    code, out = await cohort("idl", "publish", *flags, "--json")
    assert code == 0 and json.loads(out)["unchanged"] is True, out
    code, out = await cohort("idl", "fetch", *flags, "--out", str(tmp_path / "idl.json"))
    assert code == 0, out
    assert json.loads((tmp_path / "idl.json").read_text()) == dict(
        chain.core.idl.raw, address=str(chain.program_id)
    )
    store = Store(tmp_path / "x.sqlite")
    await Indexer(store, chain.rpc, [chain.program_id], core=chain.core).catch_up()
    names = {n for (n,) in store.db.execute("SELECT instructions FROM transactions")}
    assert any("anchor_idl:create" in n for n in names) and any(
        "anchor_idl:write" in n for n in names
    )
    store.close()


@pytest.fixture(scope="session")
def treasurer_elf() -> bytes:
    (program,) = build.build_all(["treasurer"], log=lambda _: None)
    return program.so_path.read_bytes()


async def test_the_treasurer_publishes_its_idl_too(chain, treasurer_elf, tmp_path):
    """The IDL instructions live in the SBF SDK (sol/anchor_idl.h): the treasurer answers them like the
    coordinator, refusing in its own error codes, and `cohort idl publish|fetch --program treasurer` work."""
    deployed = await deploy_program(
        chain.rpc, chain.authority, treasurer_elf, tmp_path / "treasurer-keypair.json"
    )
    program, idl = deployed.program_id, load_treasurer_idl()
    wallet, stranger = tmp_path / "authority.json", tmp_path / "stranger.json"
    save_keypair(chain.authority, wallet)
    save_keypair(outsider := Keypair(), stranger)
    await chain.rpc.airdrop(outsider.pubkey(), 10**9)
    flags = [
        "--cluster",
        chain.net.http_url,
        "--program",
        "treasurer",
        "--program-id",
        str(program),
    ]

    code, out = await cohort_cli(tmp_path, "idl", "fetch", *flags, "--wallet", str(wallet))
    assert code == 1 and out.strip() == (
        f"Error: no IDL is published for {program} (run `cohort idl publish --program treasurer`)"
    )
    # only the upgrade authority creates it, and the CLI names the refusal by the treasurer's errors
    code, out = await cohort_cli(tmp_path, "idl", "publish", *flags, "--wallet", str(stranger))
    code_of = {e.name: c for c, e in idl.errors.items()}
    unauthorized = code_of["Unauthorized"]
    assert code == 1 and f"Unauthorized ({unauthorized})" in out, out
    code, out = await cohort_cli(tmp_path, "idl", "publish", *flags, "--wallet", str(wallet))
    assert code == 0 and "published the IDL" in out, out
    code, out = await cohort_cli(
        tmp_path, "idl", "fetch", *flags, "--wallet", str(wallet), "--out", str(tmp_path / "t.json")
    )
    assert code == 0, out
    assert json.loads((tmp_path / "t.json").read_text()) == dict(idl.raw, address=str(program))
    # the coordinator's IDL is not touched: each program has its own IDL account
    assert await idl_account.fetch(chain.rpc, chain.program_id) is None

    async with Rpc(chain.net.http_url, idl=idl) as rpc:
        me = chain.authority.pubkey()
        with pytest.raises(ProgramError) as e:  # the rent may not go to the IDL account itself
            await rpc.send(
                [idl_account.close_instruction(me, program, idl_account.idl_address(program))],
                chain.authority,
            )
        assert (e.value.name, e.value.code) == ("DuplicateAccount", code_of["DuplicateAccount"])
        await rpc.send([idl_account.close_instruction(me, program, me)], chain.authority)
    assert await idl_account.fetch(chain.rpc, program) is None


async def test_the_program_checks_who_creates_and_writes(chain):
    program = chain.program_id
    stranger = Keypair()
    await chain.rpc.airdrop(stranger.pubkey(), 10**9)
    size = 100

    async def refused(ix, signer) -> str:
        with pytest.raises(ProgramError) as e:
            await chain.rpc.send([ix], signer)
        return e.value.name

    # only the program's upgrade authority may create the IDL account (Anchor lets anyone be first)
    assert (
        await refused(idl_account.create_instruction(stranger.pubkey(), program, size), stranger)
        == "Unauthorized"
    )
    # at the derived address only
    wrong = idl_account.create_instruction(chain.authority.pubkey(), program, size)
    wrong.accounts = [
        *wrong.accounts[:1],
        type(wrong.accounts[1])(Keypair().pubkey(), False, True),
        *wrong.accounts[2:],
    ]
    assert await refused(wrong, chain.authority) == "WrongPda"
    # no bigger than one creation can allocate
    too_big = idl_account.create_instruction(chain.authority.pubkey(), program, 20_000)
    assert await refused(too_big, chain.authority) == "InvalidInstructionData"

    created = await chain.rpc.send(
        [idl_account.create_instruction(chain.authority.pubkey(), program, size)], chain.authority
    )
    assert await compute_units(chain, created) < CU_LIMIT
    assert (
        await refused(
            idl_account.create_instruction(chain.authority.pubkey(), program, size), chain.authority
        )
        == "AlreadyInitialized"
    )
    # writes: by the authority, within the account
    assert (
        await refused(idl_account.write_instruction(stranger.pubkey(), program, b"x"), stranger)
        == "Unauthorized"
    )
    wrote = await chain.rpc.send(
        [idl_account.write_instruction(chain.authority.pubkey(), program, b"a" * 60)],
        chain.authority,
    )
    assert await compute_units(chain, wrote) < CU_LIMIT
    assert (
        await refused(
            idl_account.write_instruction(chain.authority.pubkey(), program, b"b" * 41),
            chain.authority,
        )
        == "WrongAccountSize"
    )
    stored = await idl_account.fetch(chain.rpc, program)
    assert stored.compressed == b"a" * 60
    # Resize: by the authority only, at most 10 KiB more a call, never smaller; the authority pays the rent
    grow = idl_account.resize_instruction
    assert await refused(grow(stranger.pubkey(), program, size + 1000), stranger) == "Unauthorized"
    assert await refused(
        grow(chain.authority.pubkey(), program, size + 10 * 1024 + 1), chain.authority
    ) == ("InvalidInstructionData")
    assert (
        await refused(grow(chain.authority.pubkey(), program, size - 1), chain.authority)
        == "InvalidInstructionData"
    )
    grown = await chain.rpc.send(
        [grow(chain.authority.pubkey(), program, size + 10 * 1024)], chain.authority
    )
    assert await compute_units(chain, grown) < CU_LIMIT
    for _ in range(16):  # 16 x 640 bytes: a transaction carries ~1 KB
        await chain.rpc.send(
            [idl_account.write_instruction(chain.authority.pubkey(), program, b"b" * 640)],
            chain.authority,
        )
    stored = await idl_account.fetch(chain.rpc, program)
    assert stored.compressed == b"a" * 60 + b"b" * 10 * 1024
    # Close: by the authority only, rent back
    closer = idl_account.close_instruction(stranger.pubkey(), program, stranger.pubkey())
    assert await refused(closer, stranger) == "Unauthorized"
    await chain.rpc.send(
        [
            idl_account.close_instruction(
                chain.authority.pubkey(), program, chain.authority.pubkey()
            )
        ],
        chain.authority,
    )
    assert await idl_account.fetch(chain.rpc, program) is None


async def test_a_pre_funded_idl_address_is_taken_over(chain):
    """Anyone may send lamports to any address, so a stranger could fund the IDL address before it exists
    and CreateAccountWithSeed would then refuse it forever. Create takes over a funded, empty,
    system-owned address instead: the rent shortfall is transferred (or nothing, when the gift covers it)
    and the space allocated and assigned to the program."""
    program = chain.program_id
    address = idl_account.idl_address(program)
    mallory = Keypair()
    await chain.rpc.airdrop(mallory.pubkey(), 20 * 10**9)
    for gift in (
        1_000_000,
        10 * 10**9,
    ):  # a system account's minimum, under the IDL's rent; then far more
        await chain.rpc.send([transfer(TransferParams(from_pubkey=mallory.pubkey(), to_pubkey=address,
                                                      lamports=gift))], mallory)  # fmt: skip
        assert (
            await idl_account.fetch(chain.rpc, program) is None
        )  # funded, still empty and system-owned
        done = await idl_account.publish(chain.rpc, chain.authority, program, chain.core.idl.raw)
        assert not done.unchanged and done.writes >= 1
        found = await idl_account.fetch(chain.rpc, program)
        assert found.authority == chain.authority.pubkey()
        assert found.idl() == dict(chain.core.idl.raw, address=str(program))
        owner, data = await chain.rpc.account_owner_and_data(address)
        rent = await chain.rpc.raw_request("getMinimumBalanceForRentExemption", [len(data)])
        assert owner == program and await chain.rpc.balance(address) == max(rent, gift)
        await chain.rpc.send([idl_account.close_instruction(chain.authority.pubkey(), program,
                                                            chain.authority.pubkey())], chain.authority)  # fmt: skip
        assert await idl_account.fetch(chain.rpc, program) is None


def _anchor_packages() -> Path:
    """@coral-xyz/anchor from the npm registry, installed once into an untracked folder."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if not (node and npm):
        pytest.skip(
            "!!! ANCHOR INTEROP TEST SKIPPED: node/npm not installed (scripts/setup.sh installs them)"
        )
    if not (NPM_DIR / "node_modules" / "@coral-xyz" / "anchor").is_dir():
        NPM_DIR.mkdir(parents=True, exist_ok=True)
        result = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--prefix", str(NPM_DIR), *ANCHOR_PACKAGES],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        if result.returncode != 0:
            pytest.skip(
                f"!!! ANCHOR INTEROP TEST SKIPPED: npm install failed:\n{result.stderr[-2000:]}"
            )
    return NPM_DIR


ANCHOR_SCRIPT = r"""
const anchor = require("@coral-xyz/anchor");
const { Connection, PublicKey, Keypair } = require("@solana/web3.js");
const [url, programId, runAddress, witnessData] = process.argv.slice(2);
(async () => {
  const connection = new Connection(url, "confirmed");
  const provider = new anchor.AnchorProvider(connection, new anchor.Wallet(Keypair.generate()), {});
  const idl = await anchor.Program.fetchIdl(new PublicKey(programId), provider);
  const program = new anchor.Program(idl, provider);
  const run = await program.account.run.fetch(new PublicKey(runAddress));
  const ix = program.coder.instruction.decode(Buffer.from(witnessData, "base64"));
  console.log(JSON.stringify({
    idl,
    run: { run_id: Buffer.from(run.runId).toString().replace(/\0+$/, ""), nonce: run.nonce.toString(),
           authority: run.authority.toBase58(), epoch: run.progress.epoch },
    ix: { name: ix.name, step: ix.data.step, index: ix.data.index, loss: ix.data.metadata.loss },
  }));
})().catch((e) => { console.error(e); process.exit(1); });
"""


async def witness_data(chain, run: Pubkey) -> bytes:
    """The instruction data of one witness transaction of the run, as it landed."""
    discriminator = bytes(chain.core.idl.instructions["witness"]["discriminator"])
    for s in await chain.rpc.raw_request("getSignaturesForAddress", [str(run), {"limit": 100}]):
        tx = await chain.rpc.raw_request("getTransaction", [s["signature"], {"encoding": "base64"}])
        message = VersionedTransaction.from_bytes(base64.b64decode(tx["transaction"][0])).message
        for ix in message.instructions:
            if (
                message.account_keys[ix.program_id_index] == chain.program_id
                and bytes(ix.data)[:8] == discriminator
            ):
                return bytes(ix.data)
    raise AssertionError("no witness transaction found")


async def test_anchor_fetches_our_idl_and_decodes_a_run_and_a_witness(chain, tmp_path):
    folder = await asyncio.to_thread(_anchor_packages)
    await idl_account.publish(chain.rpc, chain.authority, chain.program_id, chain.core.idl.raw)
    await chain.create_run("anchored")
    await chain.play("anchored", await chain.members())
    run = await chain.client.fetch_run("anchored")
    data = await witness_data(chain, run.address)
    script = tmp_path / "anchor_check.js"
    script.write_text(ANCHOR_SCRIPT)
    command = ["node", str(script), chain.net.http_url, str(chain.program_id), str(run.address),
               base64.b64encode(data).decode()]  # fmt: skip
    result = await asyncio.to_thread(
        subprocess.run, command, capture_output=True, text=True, timeout=120,
        env={"NODE_PATH": str(folder / "node_modules"), "PATH": os.environ.get("PATH", "/usr/bin:/bin")},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    answer = json.loads(result.stdout)
    assert answer["idl"] == dict(chain.core.idl.raw, address=str(chain.program_id))
    assert answer["run"] == {"run_id": "anchored", "nonce": str(run.nonce), "authority": str(run.authority),
                             "epoch": run.progress.epoch}  # fmt: skip
    ix = answer["ix"]
    assert ix["name"] == "witness" and ix["step"] >= 1
    assert abs(ix["loss"] - chain.metrics(ix["step"], ix["index"])["loss"]) < 1e-4
