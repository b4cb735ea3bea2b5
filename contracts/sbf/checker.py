"""The SBPF v0 instruction check, and the one rewrite v0 needs from modern clang.

clang's BPF backend can emit instructions that SBPF v0 either refuses (the verifier fails the deploy) or,
worse, runs with other semantics: v0 sign-extends the result of 32-bit add/sub/mul/neg where LLVM assumes
zero-extension, so `-mcpu=v3`/`+alu32` code computes wrong numbers silently. We reject all of those at link
time with the function they occur in. clang >= 15 also moved `callx`'s register from `imm` to `dst`; v0 reads
`imm`, so it is moved back.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

INSN = struct.Struct("<BBhi")

# instruction classes
LD, LDX, ST, STX, ALU, JMP, JMP32, ALU64 = range(8)
# memory modes
MODE_IMM, MODE_MEM, MODE_MEMSX, MODE_ATOMIC = 0x00, 0x60, 0x80, 0xC0
# ALU operations
ADD, SUB, MUL, DIV, MOD, NEG, MOV, END = 0x00, 0x10, 0x20, 0x30, 0x90, 0x80, 0xB0, 0xD0
LDDW, CALL_IMM, CALL_REG = 0x18, 0x85, 0x8D
_JMP_OPS = {0x00, 0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, 0x80, 0x90, 0xA0, 0xB0, 0xC0, 0xD0}


class CheckError(Exception):
    """Instructions that SBPF v0 cannot run correctly; `problems` names each with its function."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        shown = "\n  ".join(problems[:20])
        more = f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""
        super().__init__(f"{len(problems)} instruction(s) SBPF v0 cannot run:\n  {shown}{more}")


def _problem(opcode: int, regs: int, off: int) -> str | None:
    """Why SBPF v0 cannot run this instruction, or None when it can."""
    cls = opcode & 0x07
    if cls == JMP32:
        return "JMP32 class (emitted by -mcpu=v3); build with -mcpu=v2"
    if cls == LD:
        return None if opcode == LDDW else f"legacy packet load 0x{opcode:02x}"
    if cls in (LDX, ST, STX):
        mode = opcode & 0xE0
        if mode == MODE_MEMSX:
            return "sign-extending load (ldsx, -mcpu=v4)"
        if mode == MODE_ATOMIC:
            return "atomic operation (SBPF has none)"
        return None if mode == MODE_MEM else f"memory mode 0x{mode:02x}"
    if cls in (ALU, ALU64):
        op = opcode & 0xF0
        if cls == ALU and op in (ADD, SUB, MUL, NEG):
            return "32-bit add/sub/mul/neg (alu32): SBPF v0 sign-extends the result"
        if op in (DIV, MOD) and off == 1:
            return "signed division (sdiv/smod, -mcpu=v4); use sol_sdiv64/sol_smod64"
        if op == MOV and off != 0:
            return "sign-extending move (movsx, -mcpu=v4)"
        if cls == ALU64 and op == END:
            return "bswap (-mcpu=v4)"
        return None if op <= END else f"unknown ALU operation 0x{opcode:02x}"
    # JMP
    op = opcode & 0xF0
    if op not in _JMP_OPS or (op == 0x00 and opcode & 0x08):
        return f"unknown jump 0x{opcode:02x}"
    return None


def check_and_fix(text: bytearray, where: Callable[[int], str]) -> None:
    """Check every instruction of a linked .text in place; rewrite callx; raise CheckError listing problems.

    `where(byte_offset)` names the location (function+offset) for messages.
    """
    if len(text) % 8:
        raise CheckError([f".text size {len(text)} is not a multiple of 8"])
    problems: list[str] = []
    count = len(text) // 8
    i = 0
    while i < count:
        opcode, regs, off, _imm = INSN.unpack_from(text, i * 8)
        if opcode == LDDW:
            if i + 1 >= count or text[(i + 1) * 8] != 0:
                problems.append(f"{where(i * 8)}: incomplete lddw")
            i += 2
            continue
        if opcode == 0:
            problems.append(f"{where(i * 8)}: opcode 0 outside lddw")
        elif opcode == CALL_REG and regs & 0x0F:
            # clang >= 15 puts the target register in dst; SBPF v0 reads it from imm
            INSN.pack_into(text, i * 8, opcode, regs & 0xF0, off, regs & 0x0F)
        elif (why := _problem(opcode, regs, off)) is not None:
            problems.append(f"{where(i * 8)}: {why} (opcode 0x{opcode:02x})")
        i += 1
    if problems:
        raise CheckError(problems)
