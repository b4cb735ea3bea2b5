"""A second program costs no code: described by its program.toml alone (tests/sbf/fixtures/second_program), it
gets its C header, account indices, IDL and typed Python from the shared codegen, builds with the shared
toolchain, is listed with the programs cohort ships, deploys with `cohort deploy --program NAME` (its id kept
beside the coordinator's) and is called through its generated types. And every checked-in generated file is
what its schema generates, generation being deterministic."""

from __future__ import annotations

import asyncio
import base64
import importlib.util
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from cohort.sbf import build, codegen
from cohort.sdk import artifacts
from cohort.sdk.config import load_workspace, resolve_cluster, resolve_program_id
from cohort.sdk.errors import CohortError
from cohort.sdk.idl import IdlError
from cohort.sdk.rpc import Rpc

FIXTURE = Path(__file__).parents[1] / "sbf" / "fixtures" / "second_program"


@pytest.fixture
def contracts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A contracts/ folder with a copy of the coordinator and the greeter, which the build and the SDK take
    for the checkout's (built files go to its own target/)."""
    root = tmp_path / "contracts"
    shutil.copytree(artifacts.CHECKOUT_CONTRACTS / "coordinator", root / "coordinator")
    shutil.copytree(FIXTURE, root / "greeter")
    monkeypatch.setattr(artifacts, "CHECKOUT_CONTRACTS", root)
    monkeypatch.setattr(artifacts, "CHECKOUT_TARGET", root / "target")
    monkeypatch.setattr(build, "TARGET_DIR", root / "target")
    artifacts.checkout_files.cache_clear()
    yield root
    artifacts.checkout_files.cache_clear()


def generated_module(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("greeter_abi", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["greeter_abi"] = module  # dataclasses look their module up while it runs
    spec.loader.exec_module(module)
    return module


def test_the_checked_in_generated_files_are_what_the_schemas_generate():
    done = subprocess.run([sys.executable, "-m", "cohort.sbf.codegen", "--check"], capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    for program in codegen.programs_with_schemas():
        assert codegen.generate(program).files == codegen.generate(program).files  # deterministic


def test_examples_are_built_but_neither_shipped_nor_deployed():
    built = {p.name for p in build.find_programs()}
    shipped = {m.name for m in artifacts.programs()}
    assert {"coordinator", "toolchain_probe", "event_forger"} <= built
    assert "coordinator" in shipped and not shipped & {"toolchain_probe", "event_forger"}


def test_a_second_program_is_generated_built_and_listed(contracts: Path):
    greeter = contracts / "greeter"
    assert codegen.main(["greeter"], contracts_dir=contracts) == 0
    for name in (
        "src/generated/abi.h",
        "src/generated/ix_accounts.h",
        "idl.json",
        "greeter_abi.py",
    ):
        assert (greeter / name).is_file(), name
    assert codegen.main(["greeter", "--check"], contracts_dir=contracts) == 0
    assert "#define ACC_GREET_FRIEND 1" in (greeter / "src/generated/ix_accounts.h").read_text()

    assert [m.name for m in artifacts.programs()] == ["coordinator", "greeter"]
    assert artifacts.describe("greeter").keypair_file == "greeter-keypair.json"
    assert artifacts.idl_path("greeter") == greeter / "idl.json"
    elf = artifacts.program(name="greeter")  # built on demand in a checkout, like the coordinator
    assert elf == contracts / "target" / "greeter.so" and elf.read_bytes()[:4] == b"\x7fELF"

    abi = generated_module(greeter / "greeter_abi.py")
    assert abi.GreetArgs.SIZE == 48 and abi.MAX_TIMES == 10
    with pytest.raises(IdlError, match=r"GreetArgs\.times"):
        abi.GreetArgs(times=-1, mood="Calm", loud=False, amount=0, friend=Pubkey.default()).encode()


def test_a_second_program_deploys_and_answers_its_generated_types(workspace, contracts: Path):
    assert codegen.main(["greeter"], contracts_dir=contracts) == 0
    deployed = workspace.cli("deploy", "--program", "greeter")
    assert deployed.exit_code == 0, deployed.output
    assert "deployed greeter" in deployed.output
    program_id = Pubkey.from_string(deployed.output.split("program id ")[1].split()[0])
    ws = load_workspace(workspace.anchorfile)
    cluster = resolve_cluster(ws)
    assert resolve_program_id(ws, cluster, program="greeter") == program_id
    assert (
        resolve_program_id(ws, cluster) == workspace.program_id
    )  # the coordinator's id is untouched
    unknown = workspace.cli("deploy", "--program", "nonesuch")
    assert unknown.exit_code == 1 and "cohort ships coordinator, greeter" in unknown.output
    one_keypair = workspace.cli("deploy", "--all", "--program-keypair", str(contracts / "k.json"))
    assert (
        one_keypair.exit_code == 1
        and "--program-keypair is one program's keypair" in one_keypair.output
    )
    # --all: every shipped program, the same way (priced here: a dry run sends nothing)
    shutil.copyfile(
        build.CONTRACTS_DIR / "target" / "coordinator.so", contracts / "target" / "coordinator.so"
    )
    priced = workspace.cli("deploy", "--all", "--dry-run", "--no-build")
    assert priced.exit_code == 0, priced.output
    assert "deploying coordinator" in priced.output and "deploying greeter" in priced.output
    as_json = workspace.cli("deploy", "--all", "--dry-run", "--no-build", "--json")
    assert as_json.exit_code == 0, as_json.output
    plans = json.loads(as_json.output)
    assert [(p["program"], p["dry_run"]) for p in plans] == [
        ("coordinator", True),
        ("greeter", True),
    ]
    assert all(p["needed"] > 0 and p["elf_size"] > 0 for p in plans)

    abi = generated_module(contracts / "greeter" / "greeter_abi.py")
    friend = Keypair().pubkey()
    accounts = abi.GreetAccounts(greeter=workspace.wallet.pubkey(), friend=friend)

    async def greet(times: int) -> list[str]:
        args = abi.GreetArgs(times=times, mood=abi.Mood.Cheerful, loud=True, amount=0x0102030405060708,
                             friend=friend)  # fmt: skip
        async with Rpc(workspace.localnet.net.http_url) as rpc:
            signature = await rpc.send([abi.greet(program_id, accounts, args)], workspace.wallet)
            return await rpc.transaction_logs(signature)

    logs = asyncio.run(greet(3))
    (data,) = [
        line.removeprefix("Program data: ") for line in logs if line.startswith("Program data: ")
    ]
    event = base64.b64decode(data)
    assert (
        event[:32] == bytes(workspace.wallet.pubkey())
        and int.from_bytes(event[32:36], "little") == 3
    )
    with pytest.raises(CohortError, match=r"6000|0x1770"):
        asyncio.run(greet(2))  # the C read a field the Python did not send: WrongArguments
