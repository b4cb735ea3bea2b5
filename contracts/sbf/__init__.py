"""cohort.sbf — our C → Solana (SBPF v0) toolchain: clang compiles, `linker` links, `build` drives both;
`manifest` reads a program's program.toml and `codegen` turns its schema into C, an IDL and Python (`abi/`).

Stdlib-only Python plus the C SDK headers in `include/` (codegen alone decodes base58 with solders).
See contracts/README.md for the coding rules.
"""
