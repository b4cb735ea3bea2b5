"""Each program's instructions as typed Python, generated from its schema (`python -m cohort.sbf.codegen`):
one module per program (`coordinator`, ...) and `encoding`, the Borsh writers they share."""
