"""cohort.sbf — our C → Solana (SBPF v0) toolchain: clang compiles, `linker` links, `build` drives both.

Stdlib-only Python plus the C SDK headers in `include/`. See contracts/README.md for the coding rules.
"""
