"""Generate the coordinator's ABI files from schema.py (the one source of truth): `src/generated/abi.h`,
`src/generated/ix_accounts.h`, `idl.json` and the SDK's `cohort/sdk/abi/coordinator.py`.

    python contracts/coordinator/codegen.py           # write the stale ones
    python contracts/coordinator/codegen.py --check   # exit 1 if one is out of date

A shortcut for the shared driver, `python -m cohort.sbf.codegen coordinator` (every program's codegen).
"""

from __future__ import annotations

import sys

from cohort.sbf import codegen

if __name__ == "__main__":
    sys.exit(codegen.main(["coordinator", *sys.argv[1:]]))
