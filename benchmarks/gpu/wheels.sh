#!/usr/bin/env bash
# Run HERE, before a GPU session (the lent machine reaches no package registry): downloads into
# benchmarks/gpu/wheels (ignored by git) the wheels that the machine's image ('cuda': Python 3.12, x86-64,
# torch 2.11) lacks or holds in a version cohort does not run with:
#   missing there     the client's imports beyond torch (P2P: iroh; chain: solana, solders, pydantic, ...)
#   other versions    transformers 5 there (cohort pins <5), and the huggingface-hub and tokenizers that
#                     transformers 4 accepts (it checks them on import); typing-extensions new enough for
#                     pydantic
# Versions are this checkout's own (.venv): the member there runs the code CI runs. ~38 MB; a device call
# carries the folder: carry=["benchmarks/gpu/wheels"], command `bash benchmarks/gpu/run.sh`.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
DEST=benchmarks/gpu/wheels
NAMES=(aiolimiter annotated-types httpx2 iroh pydantic pydantic-core solana solders typing-inspection
       typing-extensions websockets transformers huggingface-hub tokenizers)
specs=()
for name in "${NAMES[@]}"; do
    version=$("$PY" -c 'import importlib.metadata as m, sys; print(m.version(sys.argv[1]))' "$name")
    specs+=("$name==$version")
done
rm -rf "$DEST"
mkdir -p "$DEST"
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 \
         manylinux_2_5_x86_64 manylinux1_x86_64; do
    platforms+=(--platform "$p")
done
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${platforms[@]}" -d "$DEST" "${specs[@]}"
echo "${specs[*]}"
du -sh "$DEST"
