"""The shape of the linker's output: what Agave's loader and the usual ELF tools expect of it."""

from __future__ import annotations

import struct
import subprocess

from cohort.sbf import elf, linker


def sections_of(blob: bytes) -> dict[str, tuple]:
    header = elf.EHDR.unpack_from(blob)
    shoff, shnum, shstrndx = header[6], header[12], header[13]
    raw = [elf.SHDR.unpack_from(blob, shoff + i * elf.SHDR.size) for i in range(shnum)]
    names = blob[raw[shstrndx][4] :]
    return {names[s[0] :].split(b"\0")[0].decode(): s for s in raw[1:]}


def test_header_and_sections(probe):
    blob = probe.so_path.read_bytes()
    ident, e_type, machine, _, entry, _phoff, _, flags, *_ = elf.EHDR.unpack_from(blob)
    assert ident[:4] == b"\x7fELF" and e_type == elf.ET_DYN and machine == elf.EM_BPF
    assert flags == 0  # SBPF v0
    sections = sections_of(blob)
    assert list(sections) == [
        ".text",
        ".rodata",
        ".dynamic",
        ".dynsym",
        ".dynstr",
        ".rel.dyn",
        ".shstrtab",
    ]
    for name, (_, _, _, addr, offset, *_rest) in sections.items():
        if name != ".shstrtab":
            assert addr == offset, f"{name}: vaddr must equal file offset"
    text = sections[".text"]
    assert text[3] <= entry < text[3] + text[5] and (entry - text[3]) % 8 == 0


def test_output_is_deterministic(probe):
    objects = sorted((probe.so_path.parent / "obj" / probe.name).glob("*.o"))
    first = linker.link([elf.read_object(str(o), o.read_bytes()) for o in objects])
    second = linker.link([elf.read_object(str(o), o.read_bytes()) for o in objects])
    assert first.elf == second.elf == probe.so_path.read_bytes()


def test_syscalls_are_undefined_dynamic_symbols(probe):
    blob = probe.so_path.read_bytes()
    sections = sections_of(blob)
    dynsym, dynstr = sections[".dynsym"], sections[".dynstr"]
    strings = blob[dynstr[4] : dynstr[4] + dynstr[5]]
    names = {}
    for off in range(dynsym[4], dynsym[4] + dynsym[5], elf.SYM.size):
        name, info, _, shndx, value, _ = elf.SYM.unpack_from(blob, off)
        names[strings[name:].split(b"\0")[0].decode()] = (info, shndx, value)
    assert names["entrypoint"][0] & 0xF == elf.STT_FUNC
    assert names["sol_sha256"][1] == elf.SHN_UNDEF
    assert (
        "sol_invoke_signed_c" in names and "probe_shuffle" not in names
    )  # internal calls are resolved
    rel = sections[".rel.dyn"]
    types = {
        struct.unpack_from("<Q", blob, off + 8)[0] & 0xFFFFFFFF
        for off in range(rel[4], rel[4] + rel[5], 16)
    }
    assert types == {elf.R_BPF_64_RELATIVE, elf.R_BPF_64_32}


def test_binutils_readelf_reads_it_without_complaint(probe):
    out = subprocess.run(
        ["readelf", "-a", "-W", str(probe.so_path)], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert "warning" not in (out.stdout + out.stderr).lower() and "error" not in out.stderr.lower()
    relocations = int(probe.map_path.read_text().split("# dynamic relocations: ")[1].split()[0])
    assert "Relocation section '.rel.dyn' at offset" in out.stdout
    assert f"contains {relocations} entries" in out.stdout
