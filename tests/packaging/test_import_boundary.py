"""The command line answers without the training stack: every `--help`, and the commands that do not train,
run in a fresh interpreter without importing torch or transformers (they took seconds and hundreds of MB
before `cohort --help` could print one line)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("torch", "transformers")

# runs `cohort ARGV` in this interpreter, then reports which heavy modules it loaded and its peak memory
_PROBE = """
import json, resource, sys
argv, heavy = json.loads(sys.argv[1]), json.loads(sys.argv[2])
sys.argv = ["cohort", *argv]
from cohort.sdk.cli import cli
try:
    cli.main(args=argv, prog_name="cohort", standalone_mode=True)
except SystemExit as e:
    code = e.code
else:
    code = 0
loaded = [m for m in heavy if m in sys.modules]
# VmHWM: this program's own peak (ru_maxrss would also count the parent's memory, forked before the exec)
try:
    status = open("/proc/self/status").read()
    peak_kib = int(status.split("VmHWM:")[1].split()[0])
except (OSError, IndexError):
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"code": code, "loaded": loaded, "peak_kib": peak_kib}), file=sys.stderr)
"""


def cohort(*argv: str, cwd: Path | None = None) -> dict:
    """Run `cohort ARGV` in a fresh interpreter; its exit code, the heavy modules it loaded, its peak RSS."""
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(argv), json.dumps(HEAVY)],
        capture_output=True, text=True, timeout=120, cwd=cwd,
    )  # fmt: skip
    lines = done.stderr.strip().splitlines()
    assert lines, (
        f"`cohort {' '.join(argv)}` printed nothing and exited {done.returncode} (killed?)"
    )
    report = json.loads(lines[-1])
    report["stdout"], report["stderr"] = done.stdout, done.stderr
    return report


# walks the whole command tree in one interpreter: `--help` of every command and subcommand, and which heavy
# module (if any) each one was the first to load
_WALK = """
import json, sys
import click
from cohort.sdk.cli import cli
heavy = json.loads(sys.argv[1])
found, culprits = [], {}

def walk(group, path):
    ctx = click.Context(group, info_name=path[-1] if path else "cohort")
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        found.append(path + [name])
        try:
            cli.main(args=path + [name, "--help"], prog_name="cohort", standalone_mode=False)
        except SystemExit:
            pass
        loaded = [m for m in heavy if m in sys.modules]
        if loaded and not culprits:
            culprits[" ".join(path + [name])] = loaded
        if isinstance(command, click.Group):
            walk(command, path + [name])

walk(cli, [])
print(json.dumps({"commands": found, "culprits": culprits}), file=sys.stderr)
"""


def test_every_help_answers_without_the_training_stack():
    done = subprocess.run([sys.executable, "-c", _WALK, json.dumps(HEAVY)], capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stderr.strip().splitlines()[-1])
    commands = {" ".join(c) for c in report["commands"]}
    assert {"train", "data", "data prepare", "run create", "wallet new", "explorer"} <= commands
    assert report["culprits"] == {}, (
        f"these --help imported the training stack: {report['culprits']}"
    )


@pytest.mark.parametrize("argv", [("--help",), ("train", "--help"), ("data", "--help")])
def test_help_in_a_fresh_interpreter(argv: tuple[str, ...]):
    report = cohort(*argv)
    assert report["code"] == 0, report["stderr"]
    assert "Usage:" in report["stdout"]
    assert report["loaded"] == [], f"`cohort {' '.join(argv)}` imported {report['loaded']}"


def test_cohort_help_is_small():
    report = cohort("--help")
    # measured 38 MB; it was ~400 MB while the help imported torch and transformers
    assert report["peak_kib"] < 100 * 1024, report["peak_kib"]


def test_data_errors_and_non_training_commands_do_not_import_torch(tmp_path: Path):
    missing = cohort(
        "data", "prepare", str(tmp_path / "nothing.txt"), "--out", str(tmp_path / "out")
    )
    assert missing["code"] == 1 and "nothing.txt" in missing["stderr"]
    assert missing["loaded"] == []

    text = tmp_path / "text.txt"
    text.write_text("In the beginning was the word. " * 200)
    prepared = cohort("data", "prepare", str(text), "--out", str(tmp_path / "shards"),
                      "--shard-tokens", "1024")  # fmt: skip
    assert prepared["code"] == 0, prepared["stderr"]
    assert prepared["loaded"] == []

    for argv in (("run", "example"), ("run", "presets", "--json"),
                 ("wallet", "address", "--wallet", str(tmp_path / "none.json"))):  # fmt: skip
        report = cohort(*argv)
        assert report["loaded"] == [], f"`cohort {' '.join(argv)}` imported {report['loaded']}"


def test_a_lazily_loaded_name_may_not_be_a_submodule_too():
    """Importing such a submodule from anywhere would rebind the package's name to the module (`from
    cohort.client.data import prepare` once gave the module prepare.py after another test imported it)."""
    import pytest

    from cohort.client.lazy import lazy_names

    with pytest.raises(ImportError, match=r"\['batch'\] are also submodules"):
        lazy_names("cohort.client.data", {"batch": ".batch"}, {})
