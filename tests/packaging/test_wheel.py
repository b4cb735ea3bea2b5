"""A built wheel works without the checkout: installed into a fresh virtual environment outside it, with no C
compiler on PATH and only the base dependencies (no torch), it runs localnet → deploy → create → status →
close on its own, with the IDL, the program and the host library it carries.

The base dependencies come from this environment's site-packages, exposed to the fresh venv one
distribution at a time (symlinks + a .pth), so nothing is downloaded and the training stack stays out."""

from __future__ import annotations

import importlib.metadata as metadata
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from cohort.sbf import build

ROOT = Path(__file__).resolve().parents[2]
COMPILERS = ("cc", "gcc", "clang", "clang-14", "clang-19", "tcc")
pytestmark = pytest.mark.slow


def base_closure() -> list[metadata.Distribution]:
    """The base install's requirements and theirs, as installed here (markers and extras evaluated)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = [(Requirement(r), "") for r in project["dependencies"]]
    seen: dict[str, metadata.Distribution] = {}
    extras_done: set[tuple[str, str]] = set()
    while wanted:
        requirement, extra = wanted.pop()
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": extra}):
            continue
        name = canonicalize_name(requirement.name)
        dist = seen.setdefault(name, metadata.distribution(name))
        for wanted_extra in ("", *requirement.extras):
            if (name, wanted_extra) not in extras_done:
                extras_done.add((name, wanted_extra))
                wanted += [(Requirement(r), wanted_extra) for r in dist.requires or []]
    return list(seen.values())


def expose(dists: list[metadata.Distribution], folder: Path) -> None:
    """Symlink each distribution's top-level files and folders (code, .libs, dist-info) into `folder`."""
    folder.mkdir()
    for dist in dists:
        site = Path(dist.locate_file(""))
        tops = {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")}
        for top in tops:
            source, link = site / top, folder / top
            if source.exists() and not link.exists():
                link.symlink_to(source)


def wheel_from_a_copy(tmp: Path) -> Path:
    """Build the wheel from a copy of the sources (the checkout's build/ folder is left alone)."""
    build.build_all(["coordinator"], log=lambda _: None)  # the developer's side has the compiler
    src = tmp / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "obj", "stamps")
    for name in ("sdk", "clients", "localnet", "contracts"):
        shutil.copytree(ROOT / name, src / name, ignore=ignore, symlinks=True)
    for name in ("setup.py", "pyproject.toml", "README.md", "MANIFEST.in"):
        shutil.copy(ROOT / name, src / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation",
                    "--no-index", "-q", "-w", str(tmp / "dist")], check=True, capture_output=True)  # fmt: skip
    (wheel,) = (tmp / "dist").glob("cohort-*.whl")
    return wheel


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict[str, str]:
    """A fresh venv outside the checkout with the wheel and the base dependencies; returns its environment."""
    tmp = tmp_path_factory.mktemp("wheel")
    wheel = wheel_from_a_copy(tmp)
    assert (
        "-linux_" in wheel.name or "-macosx_" in wheel.name
    )  # a platform wheel: it carries a native library
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
                    "--no-deps", "--no-index", "-q", str(wheel)], check=True, capture_output=True)  # fmt: skip
    expose(base_closure(), tmp / "base-deps")
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "base-deps.pth").write_text(str(tmp / "base-deps") + "\n")
    home = tmp / "home"
    home.mkdir()
    # only the venv's bin on PATH: no compiler, no checkout; HOME and config dir of its own
    return {"PATH": str(venv / "bin"), "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"),
            "LANG": "C.UTF-8", "CWD": str(home)}  # fmt: skip


def cohort(env: dict[str, str], *args: str, check: bool = True) -> subprocess.CompletedProcess:
    run_env = {k: v for k, v in env.items() if k != "CWD"}
    done = subprocess.run(["cohort", *args], env=run_env, cwd=env["CWD"], capture_output=True,
                          text=True, timeout=120, executable=shutil.which("cohort", path=env["PATH"]))  # fmt: skip
    if check:
        assert done.returncode == 0, f"cohort {' '.join(args)}:\n{done.stdout}{done.stderr}"
    return done


def python(env: dict[str, str], code: str) -> subprocess.CompletedProcess:
    run_env = {k: v for k, v in env.items() if k != "CWD"}
    return subprocess.run([str(Path(env["PATH"]) / "python"), "-c", code], env=run_env, cwd=env["CWD"],
                          capture_output=True, text=True, timeout=60)  # fmt: skip


def test_the_venv_has_no_compiler_no_checkout_and_no_torch(installed):
    assert all(shutil.which(c, path=installed["PATH"]) is None for c in COMPILERS)
    done = python(installed, "import cohort.sdk, cohort.sdk.artifacts as a; "
                             "print(cohort.sdk.__file__, a.in_checkout(), a.idl_path(), a.host_library())")  # fmt: skip
    assert done.returncode == 0, done.stderr
    where, in_checkout, idl, host = done.stdout.split()
    assert str(ROOT) not in where and in_checkout == "False"
    assert "site-packages/cohort/sdk/artifacts" in idl and host.endswith("libcoordinator.so")
    for module in ("torch", "transformers", "iroh", "tokenizers", "safetensors"):
        missing = python(installed, f"import {module}")
        assert missing.returncode == 1 and "ModuleNotFoundError" in missing.stderr, module


def test_every_command_loads_and_training_ones_say_what_they_need(installed):
    top = cohort(installed, "--help").stdout
    for command in ("deploy", "localnet", "run", "wallet", "explorer"):
        assert command in top
        cohort(installed, command, "--help")
    built = cohort(installed, "build", check=False)
    assert built.returncode == 1 and "carries them built" in built.stderr, built.stderr
    for command in ("train", "data"):
        if command in top:
            done = cohort(installed, command, check=False)
            lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
            assert done.returncode == 1 and len(lines) == 1, lines
            assert "pip install 'cohort[train]'" in lines[0], lines


def test_localnet_deploy_create_status_close_from_the_wheel_alone(installed, tmp_path: Path):
    env = dict(installed)
    log = tmp_path / "localnet.log"
    with log.open("w") as out:
        localnet = subprocess.Popen(["cohort", "localnet", "start", "--port", "0"], stdout=out, stderr=out,
                                    env={k: v for k, v in env.items() if k != "CWD"}, cwd=env["CWD"],
                                    start_new_session=True)  # fmt: skip
    try:
        url = None
        deadline = time.monotonic() + 60
        while url is None and time.monotonic() < deadline and localnet.poll() is None:
            time.sleep(0.2)
            for line in log.read_text().splitlines():
                if "JSON-RPC http://" in line:
                    url = line.split("JSON-RPC ")[1].split()[0]
        assert url, log.read_text()
        config = (
            tmp_path / "run.toml"
        )  # the documented example ships in the wheel: no checkout needed
        config.write_text(cohort(env, "run", "example").stdout)
        assert (
            "[model.optimizer]" in config.read_text()
            and "[config]" in cohort(env, "run", "example", "--demo").stdout
        )
        at = ("--cluster", url)
        cohort(env, "wallet", "new")
        cohort(env, "wallet", "airdrop", "100", *at)
        deployed = cohort(env, "deploy", *at).stdout
        assert "deployed coordinator" in deployed, deployed
        assert (
            "saved in " + str(Path(env["XDG_CONFIG_HOME"]) / "cohort" / "programs.toml") in deployed
        )
        created = cohort(env, "run", "create", str(config), *at).stdout
        assert "created run example-kjv" in created, created
        status = json.loads(cohort(env, "run", "status", "example-kjv", "--json", *at).stdout)
        assert status["phase"] == "WaitingForMembers" and status["total_steps"] == 2000
        cohort(env, "run", "pause", "example-kjv", *at)
        assert "closed run example-kjv" in cohort(env, "run", "close", "example-kjv", *at).stdout
        assert json.loads(cohort(env, "run", "list", "--json", *at).stdout) == []
    finally:
        os.killpg(localnet.pid, signal.SIGTERM)
        try:
            localnet.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(localnet.pid, signal.SIGKILL)
            localnet.wait(5)
