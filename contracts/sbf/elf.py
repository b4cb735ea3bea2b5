"""ELF64 little-endian structures: reading BPF relocatable objects, packing the shared object we write."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

EM_BPF = 247
ET_REL, ET_DYN = 1, 3

SHT_NULL, SHT_PROGBITS, SHT_SYMTAB, SHT_STRTAB = 0, 1, 2, 3
SHT_RELA, SHT_DYNAMIC, SHT_NOBITS, SHT_REL, SHT_DYNSYM = 4, 6, 8, 9, 11
SHF_WRITE, SHF_ALLOC, SHF_EXECINSTR = 0x1, 0x2, 0x4

SHN_UNDEF, SHN_ABS, SHN_COMMON = 0, 0xFFF1, 0xFFF2
STB_LOCAL, STB_GLOBAL, STB_WEAK = 0, 1, 2
STT_NOTYPE, STT_OBJECT, STT_FUNC, STT_SECTION, STT_FILE = 0, 1, 2, 3, 4

PT_LOAD, PT_DYNAMIC = 1, 2
PF_X, PF_W, PF_R = 1, 2, 4

DT_NULL, DT_STRTAB, DT_SYMTAB, DT_STRSZ, DT_SYMENT = 0, 5, 6, 10, 11
DT_REL, DT_RELSZ, DT_RELENT, DT_TEXTREL, DT_FLAGS, DT_RELCOUNT = 17, 18, 19, 22, 30, 0x6FFFFFFA
DF_TEXTREL = 0x4

# BPF relocation types (LLVM's names)
R_BPF_NONE, R_BPF_64_64, R_BPF_64_ABS64, R_BPF_64_ABS32 = 0, 1, 2, 3
R_BPF_64_NODYLD32, R_BPF_64_RELATIVE, R_BPF_64_32 = 4, 8, 10

EHDR = struct.Struct("<16sHHIQQQIHHHHHH")  # 64 bytes
SHDR = struct.Struct("<IIQQQQIIQQ")  # 64 bytes
PHDR = struct.Struct("<IIQQQQQQ")  # 56 bytes
SYM = struct.Struct("<IBBHQQ")  # 24 bytes
REL = struct.Struct("<QQ")  # 16 bytes
DYN = struct.Struct("<qQ")  # 16 bytes


class ElfError(Exception):
    """An input object that is not a BPF relocatable ELF we can link."""


@dataclass
class Section:
    index: int
    name: str
    type: int
    flags: int
    data: bytes
    size: int
    link: int
    info: int
    align: int

    @property
    def is_alloc(self) -> bool:
        return bool(self.flags & SHF_ALLOC)


@dataclass
class Symbol:
    name: str
    value: int
    size: int
    bind: int
    type: int
    shndx: int


@dataclass
class Relocation:
    offset: int
    type: int
    symbol: int


@dataclass
class ObjectFile:
    """One BPF ET_REL object: its sections, symbols and per-section relocations."""

    path: str
    sections: list[Section]
    symbols: list[Symbol]
    relocations: dict[int, list[Relocation]] = field(
        default_factory=dict
    )  # target section -> relocs


def _cstr(table: bytes, offset: int) -> str:
    end = table.find(b"\0", offset)
    return table[offset : end if end >= 0 else len(table)].decode("utf-8", "replace")


def read_object(path: str, blob: bytes) -> ObjectFile:
    """Parse a little-endian ELF64 BPF relocatable object."""
    if len(blob) < EHDR.size or blob[:4] != b"\x7fELF":
        raise ElfError(f"{path}: not an ELF file")
    ident, e_type, machine, _, _, _, shoff, _, _, _, _, shentsize, shnum, shstrndx = (
        EHDR.unpack_from(blob)
    )
    if ident[4] != 2 or ident[5] != 1:
        raise ElfError(f"{path}: not a 64-bit little-endian ELF")
    if machine != EM_BPF:
        raise ElfError(
            f"{path}: e_machine {machine} is not BPF ({EM_BPF}); compile with -target bpfel"
        )
    if e_type != ET_REL:
        raise ElfError(f"{path}: not a relocatable object (e_type {e_type}); pass .o files")
    if shentsize != SHDR.size or shoff + shnum * SHDR.size > len(blob):
        raise ElfError(f"{path}: section header table out of bounds")

    raw = [SHDR.unpack_from(blob, shoff + i * SHDR.size) for i in range(shnum)]
    names = blob[raw[shstrndx][4] : raw[shstrndx][4] + raw[shstrndx][5]]
    sections = []
    for i, (name, type_, flags, _, offset, size, link, info, align, _) in enumerate(raw):
        if type_ != SHT_NOBITS and offset + size > len(blob):
            raise ElfError(f"{path}: section {i} out of bounds")
        data = b"" if type_ == SHT_NOBITS else blob[offset : offset + size]
        sections.append(
            Section(i, _cstr(names, name), type_, flags, data, size, link, info, max(align, 1))
        )

    symbols: list[Symbol] = []
    symtab = next((s for s in sections if s.type == SHT_SYMTAB), None)
    if symtab is not None:
        strtab = sections[symtab.link].data
        for off in range(0, len(symtab.data), SYM.size):
            name, info, _, shndx, value, size = SYM.unpack_from(symtab.data, off)
            sym_name = _cstr(strtab, name)
            if info & 0xF == STT_SECTION and shndx < len(sections):
                sym_name = sections[shndx].name
            symbols.append(Symbol(sym_name, value, size, info >> 4, info & 0xF, shndx))

    relocations: dict[int, list[Relocation]] = {}
    for s in sections:
        if s.type == SHT_RELA:
            raise ElfError(f"{path}: RELA section {s.name} unexpected for BPF (it uses REL)")
        if s.type == SHT_REL:
            relocs = relocations.setdefault(s.info, [])
            for off in range(0, len(s.data), REL.size):
                r_offset, r_info = REL.unpack_from(s.data, off)
                relocs.append(Relocation(r_offset, r_info & 0xFFFFFFFF, r_info >> 32))
    return ObjectFile(path, sections, symbols, relocations)


class StringTable:
    """An ELF string table being built: names in, offsets out, each name stored once."""

    def __init__(self) -> None:
        self.data = bytearray(b"\0")
        self._offsets: dict[str, int] = {"": 0}

    def add(self, name: str) -> int:
        if name not in self._offsets:
            self._offsets[name] = len(self.data)
            self.data += name.encode() + b"\0"
        return self._offsets[name]
