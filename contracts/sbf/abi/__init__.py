"""A program's ABI, from one schema to every language that speaks it.

`schema` is the little type language a program's `schema.py` is written in; `codegen` turns a schema into a
C header (structs with layout asserts, discriminators, errors), a C header naming each instruction's account
indices, an Anchor 0.30+ IDL and a Python module of typed instruction arguments and accounts.
"""
