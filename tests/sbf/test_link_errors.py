"""What the linker must refuse, with a message that names the cause."""

from __future__ import annotations

import struct

import pytest

from cohort.sbf import checker, elf, linker


@pytest.fixture
def link_fixture(compile_fixture):
    def link_(name: str, extra_flags=()) -> linker.LinkResult:
        obj = compile_fixture(name, extra_flags)
        return linker.link([elf.read_object(str(obj), obj.read_bytes())])

    return link_


def test_mutable_globals_are_named(link_fixture):
    with pytest.raises(linker.LinkError) as e:
        link_fixture("mutable_global.c")
    message = str(e.value)
    assert "mutable globals" in message
    assert "call_count" in message and "running_total" in message
    assert ".bss" in message and ".data" in message


def test_unknown_syscall_is_a_link_error(link_fixture):
    with pytest.raises(linker.LinkError, match="sol_bogus_syscall"):
        link_fixture("unknown_syscall.c")


def test_unknown_syscall_can_be_allowed_explicitly(compile_fixture):
    obj = compile_fixture("unknown_syscall.c")
    result = linker.link(
        [elf.read_object(str(obj), obj.read_bytes())],
        extra_syscalls=frozenset({"sol_bogus_syscall"}),
    )
    assert result.syscalls == ["sol_bogus_syscall"]


def test_jmp32_is_rejected(link_fixture):
    with pytest.raises(checker.CheckError) as e:
        link_fixture("narrow_arithmetic.c", ["-mcpu=v3"])
    assert "JMP32" in str(e.value)
    assert "count_below" in str(e.value)  # the message says where


def test_alu32_is_rejected(link_fixture):
    flags = ["-mcpu=v2", "-Xclang", "-target-feature", "-Xclang", "+alu32"]
    with pytest.raises(checker.CheckError) as e:
        link_fixture("narrow_arithmetic.c", flags)
    assert "32-bit add/sub/mul/neg" in str(e.value)
    assert "wrap_add" in str(e.value)


def test_the_same_code_links_at_v2(link_fixture):
    result = link_fixture("narrow_arithmetic.c")
    assert result.text_size > 0


def _insn(opcode: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return struct.pack("<BBhi", opcode, (src << 4) | dst, off, imm)


EXIT = _insn(0x95)


@pytest.mark.parametrize(
    "insn,why",
    [
        (_insn(0xBF, 1, 2, off=8), "movsx"),
        (_insn(0x3F, 1, 2, off=1), "sdiv"),
        (_insn(0x9F, 1, 2, off=1), "sdiv"),
        (_insn(0xDB, 1, 2), "atomic"),
        (_insn(0xC3, 1, 2), "atomic"),
        (_insn(0x81, 1, 2), "ldsx"),
        (_insn(0xD7, 1, imm=64), "bswap"),
        (_insn(0x16, 1, imm=3, off=1), "JMP32"),
        (_insn(0x04, 1, imm=1), "alu32"),
        (_insn(0x1C, 1, 2), "alu32"),
        (_insn(0x84, 1), "alu32"),
        (_insn(0x20), "packet load"),
        (_insn(0x00), "opcode 0"),
        (_insn(0x18, 1), "incomplete lddw"),
    ],
)
def test_checker_rejects(insn, why):
    text = bytearray(insn) if why == "incomplete lddw" else bytearray(insn + EXIT)
    with pytest.raises(checker.CheckError, match=why):
        checker.check_and_fix(text, lambda off: f"f+{off}")


def test_checker_accepts_v0_forms():
    text = bytearray(
        _insn(0x18, 1, imm=5) + _insn(0) + _insn(0xB4, 1, imm=7)  # lddw, mov32 (zero-extends in v0 too)
        + _insn(0x3F, 1, 2) + _insn(0xDC, 1, imm=32) + _insn(0x85, imm=-1) + EXIT
    )  # fmt: skip
    before = bytes(text)
    checker.check_and_fix(text, lambda off: "")
    assert bytes(text) == before


def test_callx_register_moves_to_imm():
    text = bytearray(_insn(0x8D, dst=3) + EXIT)
    checker.check_and_fix(text, lambda off: "")
    opcode, regs, _, imm = struct.unpack_from("<BBhi", text)
    assert (opcode, regs, imm) == (0x8D, 0, 3)
