"""Two separate processes fed the same results, in different orders, end with identical weights."""

import importlib.util
import subprocess
import sys
from pathlib import Path

from cohort.client.distro import BatchId, DistroOptimizer
from cohort.client.model import build_model, llama_config, parameter_digest

WORKER = Path(__file__).with_name("apply_worker.py")
_spec = importlib.util.spec_from_file_location("apply_worker", WORKER)
worker = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(worker)


def test_separate_processes_agree(tmp_path, fill_grads):
    # four peers, two rounds of results each (the second with a non-zero previous transmission)
    names = [f"peer{i}.bin" for i in range(4)]
    for peer, name in enumerate(names):
        model = build_model(llama_config("tiny"), seed=0)
        optimizer = DistroOptimizer(model.named_parameters(), worker.CONFIG, worker.LR)
        for step in range(2):
            fill_grads(model, seed=10 * peer + step)
            payload = optimizer.codec.encode(optimizer.generate(step, BatchId(peer, peer + 1)))
            (tmp_path / f"round{step}").mkdir(exist_ok=True)
            (tmp_path / f"round{step}" / name).write_bytes(payload)

    here = worker.apply_saved(build_model(llama_config("tiny"), seed=0), tmp_path, names)
    orders = ((names[::-1], 1), ([names[2], names[0], names[3], names[1]], 2))
    workers = [
        subprocess.Popen(
            [sys.executable, str(WORKER), str(tmp_path), ",".join(order), str(threads)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for order, threads in orders
    ]
    digests = {here}
    try:
        for w in workers:
            out, err = w.communicate(timeout=120)
            assert w.returncode == 0, err
            digests.add(out.strip())
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
                w.wait()
    assert len(digests) == 1
    assert here != parameter_digest(build_model(llama_config("tiny"), seed=0))  # something changed
