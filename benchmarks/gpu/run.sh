#!/usr/bin/env bash
# Run ON the lent GPU machine (its python3 holds a CUDA torch): installs the wheels carried in
# benchmarks/gpu/wheels (made here by wheels.sh) into /tmp, puts this checkout on the path, and runs
# member.py under `timeout` (500 s; member.py's own deadline, 450 s, comes first and prints what it has).
# Its log goes to $OUT/member.log and its results to $OUT/gpu.json. Arguments go to member.py.
#     bash benchmarks/gpu/run.sh                    # llama-1b, 6 steps of 8 x 2048 tokens
#     bash benchmarks/gpu/run.sh --quick            # a smoke test on the GPU (~1 minute)
set -uo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
WHEELS=${WHEELS:-benchmarks/gpu/wheels}
OUT=${OUT:-/tmp/cohort-gpu-out}
mkdir -p "$OUT"
export OUT PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version,clocks.max.sm --format=csv 2>&1 | head -3
df -h /tmp | tail -1
free -g | head -2
if compgen -G "$WHEELS/*.whl" >/dev/null; then
    started=$(date +%s)
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/cohort-site "$WHEELS"/*.whl || exit 1
    export PYTHONPATH=/tmp/cohort-site${PYTHONPATH:+:$PYTHONPATH}
    echo "carried wheels installed in $(($(date +%s) - started)) s"
else
    echo "no wheels in $WHEELS: using the image's packages (run wheels.sh here and carry the folder)"
fi
export PYTHONPATH=sdk:clients:localnet:${PYTHONPATH:-}
timeout -k 10 "${TIMEOUT:-500}" "$PY" benchmarks/gpu/member.py "$@" 2>&1 | tee "$OUT/member.log"
exit "${PIPESTATUS[0]}"
