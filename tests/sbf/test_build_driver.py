"""The build driver: discovery, incremental rebuilds, and clear errors for bad manifests and bad C."""

from __future__ import annotations

import pytest

from cohort.sbf import build


def test_probe_is_discovered():
    names = [p.name for p in build.find_programs()]
    assert "toolchain_probe" in names


def test_second_build_is_up_to_date(probe):
    assert build.build_sbf(probe) is False
    assert build.build_host(probe) is False


def test_unknown_program_name_lists_known_ones():
    with pytest.raises(build.BuildError, match="toolchain_probe"):
        build.build_all(["no_such_program"], log=lambda _: None)


@pytest.mark.parametrize(
    "manifest,error",
    [
        ("[program]\nsources = ['*.c']\n", "name"),
        ("[program]\nname = 'bad name!'\n", "letters"),
        ("[program]\nname = 'x'\nsources = ['src/*.c']\n", "matches no file"),
        ("[program\n", "program.toml"),
    ],
)
def test_bad_manifest(tmp_path, manifest, error):
    (tmp_path / "program.toml").write_text(manifest)
    with pytest.raises(build.BuildError, match=error):
        build.load_program(tmp_path / "program.toml")


def test_compile_error_carries_compiler_output(tmp_path, monkeypatch):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "main.c").write_text("int entrypoint(void) { return undeclared_thing; }\n")
    (tmp_path / "program.toml").write_text("[program]\nname = 'broken'\n")
    monkeypatch.setattr(build, "TARGET_DIR", tmp_path / "target")
    program = build.load_program(tmp_path / "program.toml")
    with pytest.raises(build.BuildError, match="undeclared_thing"):
        build.build_sbf(program)
