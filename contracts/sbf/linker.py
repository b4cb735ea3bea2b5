"""Link BPF relocatable objects (clang -target bpfel) into an SBPF v0 shared object Agave's loader accepts.

Upstream ld.lld cannot do this: it lacks R_BPF_64_32 and cannot turn R_BPF_64_64 into dynamic relocations.
The output mirrors Solana's platform-tools layout:

  ELF header | program headers | .text | .rodata | .dynamic | .dynsym | .dynstr | .rel.dyn | .symtab?
  | .strtab? | .shstrtab | section headers

with vaddr == file offset for every section (the loader rejects a .text whose address and offset differ).
Relocations, resolved at link time where possible:
  * lddw (R_BPF_64_64): the target address goes into the two imm halves, plus a dynamic R_BPF_64_RELATIVE
    (the loader adds the program region base, 1 << 32);
  * 64-bit pointers in .rodata (R_BPF_64_ABS64): the address goes in the *high* u32 of the word, plus
    R_BPF_64_RELATIVE; for data the v0 loader reads the u32 at offset + 4, adds 1 << 32 and writes back u64;
  * calls (R_BPF_64_32) to functions of the program become pc-relative `call imm` (the loader registers
    their targets); calls to undefined names become `call -1` + a dynamic R_BPF_64_32 against an undefined
    dynamic symbol, which the loader resolves to the syscall of that name.
"""

from __future__ import annotations

import argparse
import bisect
import struct
import sys
from dataclasses import dataclass, field
from pathlib import Path

from . import elf
from .checker import CALL_IMM, INSN, LDDW, CheckError, check_and_fix
from .syscalls import AGAVE_SYSCALLS

HEADER_END = elf.EHDR.size
ENTRYPOINT = "entrypoint"
_PAGE = 0x1000


class LinkError(Exception):
    """The objects cannot become a valid SBPF v0 program; the message says why and where."""


@dataclass
class _Placed:
    """Where an input section landed in the output."""

    kind: str  # "text" or "rodata"
    address: int


@dataclass
class LinkResult:
    elf: bytes
    map: str
    text_size: int
    rodata_size: int
    syscalls: list[str] = field(default_factory=list)


def _align(value: int, alignment: int) -> int:
    return (value + alignment - 1) // alignment * alignment


def _is_text(s: elf.Section) -> bool:
    return s.is_alloc and s.type == elf.SHT_PROGBITS and bool(s.flags & elf.SHF_EXECINSTR)


def _is_rodata(s: elf.Section) -> bool:
    # .data.rel.ro holds const data that only needed relocating; we relocate at link time, so it is read-only
    writable = bool(s.flags & elf.SHF_WRITE) and not s.name.startswith(".data.rel.ro")
    return s.is_alloc and s.type == elf.SHT_PROGBITS and not writable and not _is_text(s)


def _writable_sections_error(objects: list[elf.ObjectFile]) -> str | None:
    problems = []
    for obj in objects:
        for s in obj.sections:
            if s.is_alloc and s.size and not _is_text(s) and not _is_rodata(s):
                names = sorted(
                    {
                        sym.name
                        for sym in obj.symbols
                        if sym.shndx == s.index
                        and sym.type in (elf.STT_OBJECT, elf.STT_NOTYPE)
                        and sym.name
                    }
                )
                problems.append(
                    f"{obj.path}: writable section {s.name} ({s.size} bytes), symbols: "
                    f"{', '.join(names) or '(unnamed)'}"
                )
        for sym in obj.symbols:
            if sym.shndx == elf.SHN_COMMON:
                problems.append(f"{obj.path}: common (uninitialised global) symbol {sym.name}")
    if not problems:
        return None
    return (
        "Solana programs cannot have mutable globals or statics (.data/.bss); keep state in account "
        "data, on the stack or on the heap, and declare constant tables `const T *const`:\n  "
        + "\n  ".join(problems)
    )


class _Linker:
    def __init__(self, objects: list[elf.ObjectFile], extra_syscalls: frozenset[str]) -> None:
        self.objects = objects
        self.known_syscalls = AGAVE_SYSCALLS | extra_syscalls
        self.placed: dict[tuple[int, int], _Placed] = {}
        self.globals: dict[str, tuple[int, elf.Symbol]] = {}
        self.text = bytearray()
        self.rodata = bytearray()
        self.text_start = 0
        self.rodata_start = 0
        self.relative: list[int] = []  # offsets needing R_BPF_64_RELATIVE
        self.syscall_calls: list[tuple[int, str]] = []  # (offset, name) needing R_BPF_64_32

    # -- symbols ------------------------------------------------------------------------------------
    def collect_globals(self) -> None:
        for oi, obj in enumerate(self.objects):
            for sym in obj.symbols:
                if sym.bind == elf.STB_LOCAL or sym.shndx in (elf.SHN_UNDEF, elf.SHN_COMMON):
                    continue
                prior = self.globals.get(sym.name)
                if (
                    prior is not None
                    and prior[1].bind == elf.STB_GLOBAL
                    and sym.bind == elf.STB_GLOBAL
                ):
                    raise LinkError(
                        f"symbol {sym.name} defined in both {self.objects[prior[0]].path} and {obj.path}"
                    )
                if prior is None or prior[1].bind == elf.STB_WEAK:
                    self.globals[sym.name] = (oi, sym)

    def address_of(self, oi: int, sym: elf.Symbol) -> int | None:
        """The output address of a symbol, or None for an undefined one (a syscall)."""
        if sym.shndx == elf.SHN_UNDEF:
            found = self.globals.get(sym.name)
            return None if found is None else self.address_of(*found)
        if sym.shndx == elf.SHN_ABS:
            return sym.value
        placed = self.placed.get((oi, sym.shndx))
        if placed is None:
            section = self.objects[oi].sections[sym.shndx].name
            raise LinkError(
                f"{self.objects[oi].path}: {sym.name} is in non-loadable section {section}"
            )
        return placed.address + sym.value

    # -- layout -------------------------------------------------------------------------------------
    def place(self, text_start: int) -> None:
        self.text_start = text_start
        for oi, obj in enumerate(self.objects):
            for s in obj.sections:
                if _is_text(s):
                    pad = _align(len(self.text), max(8, s.align)) - len(self.text)
                    self.text += bytes(pad)
                    self.placed[(oi, s.index)] = _Placed("text", text_start + len(self.text))
                    self.text += s.data
        self.rodata_start = _align(text_start + len(self.text), 8)
        for oi, obj in enumerate(self.objects):
            for s in obj.sections:
                if _is_rodata(s):
                    pad = _align(len(self.rodata), s.align) - len(self.rodata)
                    self.rodata += bytes(pad)
                    self.placed[(oi, s.index)] = _Placed(
                        "rodata", self.rodata_start + len(self.rodata)
                    )
                    self.rodata += s.data
                elif s.is_alloc and s.size == 0:
                    self.placed[(oi, s.index)] = _Placed(
                        "rodata", self.rodata_start + len(self.rodata)
                    )

    def _buffer(self, address: int) -> tuple[bytearray, int]:
        if self.text_start <= address < self.text_start + len(self.text):
            return self.text, address - self.text_start
        return self.rodata, address - self.rodata_start

    # -- relocations --------------------------------------------------------------------------------
    def relocate(self) -> None:
        for oi, obj in enumerate(self.objects):
            for target, relocs in obj.relocations.items():
                placed = self.placed.get((oi, target))
                if placed is None:
                    continue  # debug info, BTF, ... are not part of the program
                for r in relocs:
                    self._relocate_one(oi, obj, placed, r)

    def _relocate_one(
        self, oi: int, obj: elf.ObjectFile, placed: _Placed, r: elf.Relocation
    ) -> None:
        sym = obj.symbols[r.symbol]
        at = placed.address + r.offset
        buf, off = self._buffer(at)
        if r.type == elf.R_BPF_NONE:
            return
        if r.type == elf.R_BPF_64_64:
            if placed.kind != "text" or buf[off] != LDDW:
                raise LinkError(f"{obj.path}: R_BPF_64_64 at 0x{r.offset:x} is not on an lddw")
            target = self.address_of(oi, sym)
            if target is None:
                raise LinkError(
                    f"{obj.path}: undefined symbol {sym.name} (its address is taken; only functions and "
                    f"constants defined in the program can be addressed)"
                )
            addend = struct.unpack_from("<i", buf, off + 4)[0]
            value = target + addend
            struct.pack_into("<II", buf, off + 4, value & 0xFFFFFFFF, 0)
            struct.pack_into("<I", buf, off + 12, value >> 32)
            self.relative.append(at)
        elif r.type == elf.R_BPF_64_ABS64:
            target = self.address_of(oi, sym)
            if target is None:
                raise LinkError(f"{obj.path}: undefined symbol {sym.name} referenced from data")
            if placed.kind == "text":
                raise LinkError(f"{obj.path}: 64-bit data relocation inside code at 0x{r.offset:x}")
            value = target + struct.unpack_from("<Q", buf, off)[0]
            if value >= 1 << 32:
                raise LinkError(f"{obj.path}: pointer to {sym.name} beyond 4 GiB")
            # the v0 loader reads the address from the high half (legacy quirk) and writes back a u64
            struct.pack_into("<II", buf, off, 0, value)
            self.relative.append(at)
        elif r.type == elf.R_BPF_64_32:
            opcode, regs, insn_off, imm = INSN.unpack_from(buf, off)
            if placed.kind != "text" or opcode != CALL_IMM:
                raise LinkError(f"{obj.path}: R_BPF_64_32 at 0x{r.offset:x} is not on a call")
            target = self.address_of(oi, sym)
            if target is None:
                if sym.name not in self.known_syscalls:
                    raise LinkError(
                        f"{obj.path}: call to unknown function or syscall {sym.name!r}; it is neither "
                        f"defined in the objects linked nor an Agave syscall"
                    )
                INSN.pack_into(buf, off, opcode, regs, insn_off, -1)
                self.syscall_calls.append((at, sym.name))
                return
            target += (imm + 1) * 8  # section-symbol calls carry the offset in imm
            rel = (target - at) // 8 - 1
            if (
                not (self.text_start <= target < self.text_start + len(self.text))
                or (target - at) % 8
            ):
                raise LinkError(f"{obj.path}: call to {sym.name} lands outside the code")
            if rel == -1:
                raise LinkError(f"{obj.path}: call to {sym.name} would read as a syscall (imm -1)")
            INSN.pack_into(buf, off, opcode, regs, insn_off, rel)
        else:
            raise LinkError(
                f"{obj.path}: unsupported relocation type {r.type} against {sym.name} in "
                f"{'code' if placed.kind == 'text' else 'data'}"
            )

    # -- names for messages and the map ---------------------------------------------------------------
    def functions(self) -> list[tuple[int, int, str, str]]:
        """(address, size, name, object) of every function symbol, by address."""
        out = []
        for oi, obj in enumerate(self.objects):
            for sym in obj.symbols:
                if sym.type == elf.STT_FUNC and sym.shndx not in (elf.SHN_UNDEF, elf.SHN_ABS):
                    out.append((self.address_of(oi, sym), sym.size, sym.name, obj.path))
        return sorted(out)

    def data_objects(self) -> list[tuple[int, int, str, str]]:
        out = []
        for oi, obj in enumerate(self.objects):
            for sym in obj.symbols:
                if sym.type == elf.STT_OBJECT and (oi, sym.shndx) in self.placed:
                    out.append((self.address_of(oi, sym), sym.size, sym.name, obj.path))
        return sorted(out)


def _describe(functions: list[tuple[int, int, str, str]], address: int) -> str:
    starts = [f[0] for f in functions]
    i = bisect.bisect_right(starts, address) - 1
    if i < 0:
        return f"0x{address:x}"
    start, _, name, path = functions[i]
    return f"{path}: {name}+0x{address - start:x}"


def link(
    objects: list[elf.ObjectFile],
    *,
    symtab: bool = False,
    extra_syscalls: frozenset[str] = frozenset(),
) -> LinkResult:
    """Link objects into an SBPF v0 ELF. Raises LinkError or CheckError with a message naming the cause."""
    if not objects:
        raise LinkError("no input objects")
    problem = _writable_sections_error(objects)
    if problem:
        raise LinkError(problem)

    lk = _Linker(objects, extra_syscalls)
    lk.collect_globals()
    if ENTRYPOINT not in lk.globals or lk.globals[ENTRYPOINT][1].type != elf.STT_FUNC:
        raise LinkError(f"no global function `{ENTRYPOINT}` (the program's entry point) is defined")

    has_rodata = any(_is_rodata(s) and s.size for o in objects for s in o.sections)
    phnum = 4 if has_rodata else 3
    lk.place(_align(HEADER_END + phnum * elf.PHDR.size, 8))
    lk.relocate()
    functions = lk.functions()
    check_and_fix(lk.text, lambda off: _describe(functions, lk.text_start + off))

    entry = lk.address_of(*lk.globals[ENTRYPOINT])
    entry_size = lk.globals[ENTRYPOINT][1].size
    return _write(lk, entry, entry_size, functions, symtab, has_rodata)


def _write(
    lk: _Linker,
    entry: int,
    entry_size: int,
    functions: list[tuple[int, int, str, str]],
    symtab: bool,
    has_rodata: bool,
) -> LinkResult:
    syscalls = sorted({name for _, name in lk.syscall_calls})
    dynstr = elf.StringTable()
    dynsyms = [elf.SYM.pack(0, 0, 0, 0, 0, 0)]
    # entrypoint first, then the syscalls (undefined, NOTYPE: the loader hashes their names)
    dynsyms.append(
        elf.SYM.pack(
            dynstr.add(ENTRYPOINT), (elf.STB_GLOBAL << 4) | elf.STT_FUNC, 0, 1, entry, entry_size
        )
    )
    sym_index = {}
    for name in syscalls:
        if len(name) >= 64:
            raise LinkError(f"syscall name {name!r} is too long for the loader (64 bytes)")
        sym_index[name] = len(dynsyms)
        dynsyms.append(elf.SYM.pack(dynstr.add(name), elf.STB_GLOBAL << 4, 0, 0, 0, 0))
    rel_entries = [elf.REL.pack(at, elf.R_BPF_64_RELATIVE) for at in sorted(lk.relative)]
    rel_entries += [
        elf.REL.pack(at, (sym_index[name] << 32) | elf.R_BPF_64_32)
        for at, name in sorted(lk.syscall_calls)
    ]
    dynsym_bytes = b"".join(dynsyms)
    rel_bytes = b"".join(rel_entries)

    # addresses of the dynamic-linking sections (vaddr == offset)
    text_addr, rodata_addr = lk.text_start, lk.rodata_start
    rodata_end = rodata_addr + len(lk.rodata)
    dynamic_addr = _align(rodata_end if has_rodata else text_addr + len(lk.text), 8)
    dyn_entries_count = 8 + (4 if rel_bytes else 0)
    dynamic_size = dyn_entries_count * elf.DYN.size
    dynsym_addr = dynamic_addr + dynamic_size
    dynstr_addr = dynsym_addr + len(dynsym_bytes)
    rel_addr = _align(dynstr_addr + len(dynstr.data), 8)
    dyn_entries = [
        (elf.DT_FLAGS, elf.DF_TEXTREL),
        (elf.DT_SYMTAB, dynsym_addr),
        (elf.DT_SYMENT, elf.SYM.size),
        (elf.DT_STRTAB, dynstr_addr),
        (elf.DT_STRSZ, len(dynstr.data)),
        (elf.DT_TEXTREL, 0),
    ]
    if rel_bytes:
        dyn_entries[1:1] = [
            (elf.DT_REL, rel_addr),
            (elf.DT_RELSZ, len(rel_bytes)),
            (elf.DT_RELENT, elf.REL.size),
            (elf.DT_RELCOUNT, len(lk.relative)),
        ]
    dyn_entries += [(elf.DT_NULL, 0)] * (dyn_entries_count - len(dyn_entries))
    dynamic_bytes = b"".join(elf.DYN.pack(t, v) for t, v in dyn_entries)

    out = bytearray(rel_addr)
    out[text_addr : text_addr + len(lk.text)] = lk.text
    if has_rodata:
        out[rodata_addr:rodata_end] = lk.rodata
    out[dynamic_addr : dynamic_addr + dynamic_size] = dynamic_bytes
    out[dynsym_addr : dynsym_addr + len(dynsym_bytes)] = dynsym_bytes
    out[dynstr_addr : dynstr_addr + len(dynstr.data)] = dynstr.data
    out += rel_bytes

    shstr = elf.StringTable()
    # (name, type, flags, addr, offset, size, link, info, align, entsize); indices are fixed below
    sections: list[tuple] = [("", elf.SHT_NULL, 0, 0, 0, 0, 0, 0, 0, 0)]
    sections.append((".text", elf.SHT_PROGBITS, elf.SHF_ALLOC | elf.SHF_EXECINSTR, text_addr,
                     text_addr, len(lk.text), 0, 0, 8, 0))  # fmt: skip
    if has_rodata:
        sections.append((".rodata", elf.SHT_PROGBITS, elf.SHF_ALLOC, rodata_addr, rodata_addr,
                         len(lk.rodata), 0, 0, 8, 0))  # fmt: skip
    dynstr_index = len(sections) + 2
    dynsym_index = len(sections) + 1
    sections.append((".dynamic", elf.SHT_DYNAMIC, elf.SHF_ALLOC | elf.SHF_WRITE, dynamic_addr,
                     dynamic_addr, dynamic_size, dynstr_index, 0, 8, elf.DYN.size))  # fmt: skip
    sections.append((".dynsym", elf.SHT_DYNSYM, elf.SHF_ALLOC, dynsym_addr, dynsym_addr,
                     len(dynsym_bytes), dynstr_index, 1, 8, elf.SYM.size))  # fmt: skip
    sections.append((".dynstr", elf.SHT_STRTAB, elf.SHF_ALLOC, dynstr_addr, dynstr_addr,
                     len(dynstr.data), 0, 0, 1, 0))  # fmt: skip
    if rel_bytes:
        sections.append((".rel.dyn", elf.SHT_REL, elf.SHF_ALLOC, rel_addr, rel_addr, len(rel_bytes),
                         dynsym_index, 0, 8, elf.REL.size))  # fmt: skip
    if symtab:
        strtab = elf.StringTable()
        syms = [elf.SYM.pack(0, 0, 0, 0, 0, 0)]
        for address, size, name, _ in functions:
            syms.append(elf.SYM.pack(strtab.add(name), elf.STT_FUNC, 0, 1, address, size))
        symtab_bytes = b"".join(syms)
        symtab_off = _align(len(out), 8)
        out += bytes(symtab_off - len(out)) + symtab_bytes
        strtab_index = len(sections) + 1
        sections.append((".symtab", elf.SHT_SYMTAB, 0, 0, symtab_off, len(symtab_bytes), strtab_index,
                         len(syms), 8, elf.SYM.size))  # fmt: skip
        sections.append((".strtab", elf.SHT_STRTAB, 0, 0, len(out), len(strtab.data), 0, 0, 1, 0))
        out += strtab.data
    shstrtab_index = len(sections)
    for s in sections:
        shstr.add(s[0])
    shstr.add(".shstrtab")
    sections.append((".shstrtab", elf.SHT_STRTAB, 0, 0, len(out), 0, 0, 0, 1, 0))
    sections[-1] = (*sections[-1][:5], len(shstr.data), *sections[-1][6:])
    out += shstr.data
    shoff = _align(len(out), 8)
    out += bytes(shoff - len(out))
    for name, type_, flags, addr, offset, size, link_, info, align, entsize in sections:
        out += elf.SHDR.pack(
            shstr.add(name), type_, flags, addr, offset, size, link_, info, align, entsize
        )

    phdrs = [(elf.PT_LOAD, elf.PF_R | elf.PF_X, text_addr, len(lk.text), _PAGE)]
    if has_rodata:
        phdrs.append((elf.PT_LOAD, elf.PF_R, rodata_addr, len(lk.rodata), _PAGE))
    dyn_region = rel_addr + len(rel_bytes) - dynamic_addr
    phdrs.append((elf.PT_LOAD, elf.PF_R, dynamic_addr, dyn_region, _PAGE))
    phdrs.append((elf.PT_DYNAMIC, elf.PF_R | elf.PF_W, dynamic_addr, dynamic_size, 8))
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)
    out[: elf.EHDR.size] = elf.EHDR.pack(
        ident, elf.ET_DYN, elf.EM_BPF, 1, entry, elf.EHDR.size, shoff, 0, elf.EHDR.size,
        elf.PHDR.size, len(phdrs), elf.SHDR.size, len(sections), shstrtab_index,
    )  # fmt: skip
    for i, (type_, flags, addr, size, align) in enumerate(phdrs):
        elf.PHDR.pack_into(out, elf.EHDR.size + i * elf.PHDR.size, type_, flags, addr, addr, addr,
                           size, size, align)  # fmt: skip

    return LinkResult(
        bytes(out),
        _map_text(lk, functions, sections, syscalls, len(rel_entries)),
        len(lk.text),
        len(lk.rodata),
        syscalls,
    )


def _map_text(
    lk: _Linker,
    functions: list[tuple[int, int, str, str]],
    sections: list[tuple],
    syscalls: list[str],
    relocation_count: int,
) -> str:
    lines = ["# sections: name address size"]
    for s in sections[1:]:
        if s[2] & elf.SHF_ALLOC:
            lines.append(f"{s[0]:<10} 0x{s[3]:08x} {s[5]:>8}")
    lines.append(f"\n# functions: address size name (object)  [{len(lk.text) // 8} instructions]")
    for address, size, name, path in functions:
        lines.append(f"0x{address:08x} {size:>8} {name} ({Path(path).name})")
    lines.append("\n# read-only data: address size name (object)")
    for address, size, name, path in lk.data_objects():
        lines.append(f"0x{address:08x} {size:>8} {name} ({Path(path).name})")
    lines.append(f"\n# syscalls: {', '.join(syscalls) or '(none)'}")
    lines.append(f"# dynamic relocations: {relocation_count}")
    return "\n".join(lines) + "\n"


def link_files(
    inputs: list[Path], output: Path, *, map_path: Path | None = None, symtab: bool = False,
    extra_syscalls: frozenset[str] = frozenset(),
) -> LinkResult:  # fmt: skip
    """Read objects from disk, link, write the .so (and the map)."""
    objects = [elf.read_object(str(p), p.read_bytes()) for p in inputs]
    result = link(objects, symtab=symtab, extra_syscalls=extra_syscalls)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_bytes(result.elf)
    if map_path is not None:
        map_path.write_text(result.map)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m cohort.sbf.linker",
        description="Link BPF relocatable objects into an SBPF v0 Solana program (.so).",
    )
    parser.add_argument("inputs", nargs="+", type=Path, help="BPF .o files (clang -target bpfel)")
    parser.add_argument("-o", "--output", type=Path, required=True)
    parser.add_argument("--map", type=Path, help="write a link map (sections, functions, syscalls)")
    parser.add_argument("--symtab", action="store_true", help="keep function names for disassembly")
    parser.add_argument(
        "--allow-syscall", action="append", default=[], metavar="NAME",
        help="accept a syscall name this linker does not know (e.g. one newer than its list)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    try:
        result = link_files(
            args.inputs, args.output, map_path=args.map, symtab=args.symtab,
            extra_syscalls=frozenset(args.allow_syscall),
        )  # fmt: skip
    except (LinkError, CheckError, elf.ElfError, OSError) as e:
        print(f"sbf-link: error: {e}", file=sys.stderr)
        return 1
    print(f"{args.output}: {len(result.elf)} bytes, {result.text_size // 8} instructions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
