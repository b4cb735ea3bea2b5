"""One cohort member of the `llama-1b` shape on one GPU, in the run's precision (issue 29, item 7).

The member's own code path (`cohort.client.runtime.trainer.LocalReplica`), random tokens over a 32k
vocabulary, the example run's DisTrO settings (chunk 64, top-32, 1-bit, decay 0.999):

  throughput  --steps steps of --sequences x --seq-len tokens (the first a warm-up, not counted): `train`
              (lookahead, forward/backward in micro-batches, generate, encode) and `apply` of 4 results
              (ours and 3 re-headed copies), timed apart; forward/backward alone once more, so generate's
              share shows; tokens/s and MFU = 6 x parameters x tokens/s / the card's peak FLOP/s
  memory      peak GPU memory of each phase (max_memory_allocated and _reserved) and the host's peak RSS,
              as bytes per parameter
  check       verification on (`start_epoch(verified=True)`): two steps that commit their optimizer state,
              then one real `verify_step` of the last from those states: seconds, peak memory, verdict
  cross       one step's 4 distinct results applied on this replica and on a CPU replica holding the same
              weights: `digest()` must be equal (the apply is exact arithmetic, distro/aggregate.py)

Bounded: after --deadline seconds (from the start) it prints what it has, marks the run "partial" and
exits 0; a phase that would not fit in the time left is skipped. The results also go, as JSON, to
$OUT/gpu.json when OUT is set (or to --json), rewritten after every phase.

    python3 benchmarks/gpu/member.py                                 # llama-1b, 6 x 8 x 2048 tokens, cuda
    python3 benchmarks/gpu/member.py --micro-batch 2 --steps 4       # a smaller try
    .venv/bin/python benchmarks/gpu/member.py --quick --device cpu   # a dry run here (~1 min on 2 cores)
    bash benchmarks/gpu/run.sh                                       # on the lent machine (README.md here)

Exit status: 0 complete or partial, 1 a phase failed, 2 refused (no CUDA device, or cohort not importable).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import replace
from pathlib import Path
from typing import Any

STARTED = time.monotonic()
# fewer stranded blocks after an out-of-memory retry; set before torch is imported
os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")

ROOT = Path(__file__).resolve().parents[2]

# Dense peak TFLOP/s (no sparsity), from NVIDIA's data sheets: fp32 on the CUDA cores, tf32 and bf16 on the
# tensor cores. The H200 is the H100's chip with more and faster memory: the same peaks. First match wins.
PEAKS: tuple[tuple[str, str, float, float, float], ...] = (
    # (in the device name, card, fp32, tf32, bf16)
    ("H100 PCIe", "H100 PCIe", 51.2, 378.0, 756.0),
    ("H100 NVL", "H100 NVL", 60.0, 417.5, 835.0),
    ("H200 NVL", "H200 NVL", 60.0, 417.5, 835.0),
    ("H100", "H100 SXM", 67.0, 495.0, 989.0),
    ("H200", "H200 SXM (the H100's chip)", 67.0, 495.0, 989.0),
    ("A100", "A100 SXM", 19.5, 156.0, 312.0),
)

FULL = {"preset": "llama-1b", "seq_len": 2048, "sequences": 8, "steps": 6, "micro_batch": None}
QUICK = {"preset": "llama-tiny", "seq_len": 128, "sequences": 4, "steps": 3, "micro_batch": 2}
RESULTS = 4  # results applied per step, ours among them
THROUGHPUT_SHARE = (
    0.4  # throughput steps stop early past this share of the deadline (the rest need time)
)
IO_BYTES_PER_S = (
    0.7e9  # a conservative disk + sha256 rate, to estimate a check's cost before starting it
)


def _checkout_on_path() -> None:
    """Where cohort is not installed (the lent GPU machine), import it from this checkout."""
    import importlib.util

    if importlib.util.find_spec("cohort") is None:
        for root in ("sdk", "clients", "localnet"):
            if (ROOT / root / "cohort").is_dir():
                sys.path.append(str(ROOT / root))


def _proc_status(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _reset_host_peak() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
        return True
    except OSError:
        return False


def _gb(n: float | None) -> str:
    if n is None:
        return "—"
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB"


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


class DoesNotFit(RuntimeError):
    """Out of device memory at a micro-batch of one sequence."""


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.lock = threading.RLock()
        self.finished = False
        self.current = "start"
        self.errors = 0
        self.json_path = (
            Path(args.json)
            if args.json
            else (Path(os.environ["OUT"]) / "gpu.json" if os.environ.get("OUT") else None)
        )
        self.R: dict[str, Any] = {"status": "running", "args": vars(args), "notes": []}

    # -- bookkeeping ------------------------------------------------------------------------------

    def elapsed(self) -> float:
        return time.monotonic() - STARTED

    def left(self) -> float:
        return self.args.deadline - self.elapsed()

    def log(self, message: str) -> None:
        print(f"[{self.elapsed():6.1f} s] {message}", flush=True)

    def put(self, section: str, **values: Any) -> None:
        with self.lock:
            self.R.setdefault(section, {}).update(values)

    def note(self, message: str) -> None:
        with self.lock:
            self.R["notes"].append(message)
        self.log(message)

    def save(self) -> None:
        if self.json_path is None:
            return
        with self.lock:
            self.R["elapsed_s"] = round(self.elapsed(), 1)
            text = json.dumps(self.R, indent=1, default=str)
        try:
            self.json_path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.json_path.with_suffix(".partial")
            tmp.write_text(text)
            os.replace(tmp, self.json_path)
        except OSError as e:
            print(f"could not write {self.json_path}: {e}", flush=True)

    def arm(self) -> None:
        """The deadline: a watchdog that prints what there is and leaves, whatever the main thread is in."""
        timer = threading.Timer(max(self.left(), 0.0), self.stop, args=("deadline",))
        timer.daemon = True
        timer.start()
        signal.signal(signal.SIGTERM, lambda *_: self.stop("SIGTERM"))

    def stop(self, why: str) -> None:
        with self.lock:
            if self.finished:
                return
            self.finished = True
            self.R["status"] = "partial"
            self.R["reason"] = (
                f"{why} after {self.elapsed():.0f} s (deadline {self.args.deadline:.0f} s) during "
                f"{self.current}"
            )
            try:
                self.report()
            finally:
                self.save()
        sys.stdout.flush()
        sys.stderr.flush()
        scratch = getattr(self, "scratch", None)
        if scratch is not None:  # ~30 GB at 1.2B: a rerun on the same machine needs the disk
            shutil.rmtree(scratch, ignore_errors=True)
        os._exit(0)

    def finish(self) -> int:
        with self.lock:
            if self.finished:
                return 0
            self.finished = True
            if self.errors:
                self.R["status"] = "failed"
            elif self.R["status"] == "running":
                self.R["status"] = "complete"
            self.report()
            self.save()
        return 1 if self.errors else 0

    def failed(self, phase: str, e: BaseException) -> None:
        self.errors += 1
        line = f"{type(e).__name__}: {e}".splitlines()[0][:300]
        self.put(phase, error=line, traceback=traceback.format_exc()[-4000:])
        self.log(f"{phase} failed: {line}")
        traceback.print_exc()

    def skip(self, phase: str, estimate: float) -> bool:
        """True (and noted) when `phase`, estimated at `estimate` seconds, does not fit in the time left."""
        if estimate <= self.left():
            return False
        self.put(phase, skipped=f"estimated {estimate:.0f} s, {self.left():.0f} s left")
        self.note(f"{phase} skipped: estimated {estimate:.0f} s, {self.left():.0f} s left")
        with self.lock:
            self.R["status"] = "partial"
            self.R.setdefault("reason", f"{phase} skipped for time")
        return True

    # -- the run ----------------------------------------------------------------------------------

    def setup(self) -> bool:
        """Imports, the device, the spec. False: refused (the reason printed)."""
        args = self.args
        _checkout_on_path()
        try:
            import torch
            import transformers

            from cohort.client.data import BatchId
            from cohort.client.model import lm_loss
            from cohort.client.runtime import trainer as trainer_module
            from cohort.sdk.presets import MODEL_PRESETS, DistroSpec, LrSpec, TrainingSpec
        except ImportError as e:
            print(
                f"refused: cannot import {e.name or e} ({e}). On the lent GPU machine run "
                "`bash benchmarks/gpu/run.sh`, carrying benchmarks/gpu/wheels made here by "
                "`bash benchmarks/gpu/wheels.sh` (benchmarks/gpu/README.md).",
                flush=True,
            )
            self.R.update(status="refused", reason=f"import: {e}")
            return False
        self.torch, self.BatchId, self.lm_loss, self.trainer_module = (
            torch,
            BatchId,
            lm_loss,
            trainer_module,
        )
        self.out_of_memory = getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)
        env = {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "torch_cuda": torch.version.cuda,
            "transformers": transformers.__version__,
            "host": platform.node(),
            "cpu_threads": torch.get_num_threads(),
        }
        self.device = torch.device(args.device)
        if self.device.type == "cuda":
            if not torch.cuda.is_available():
                print(
                    f"refused: no CUDA device (torch {torch.__version__}, built for CUDA "
                    f"{torch.version.cuda}). For a dry run on a CPU: --quick --device cpu",
                    flush=True,
                )
                self.R.update(status="refused", reason="no CUDA device", environment=env)
                return False
            props = torch.cuda.get_device_properties(self.device)
            free, total = torch.cuda.mem_get_info(self.device)
            env.update(
                device=torch.cuda.get_device_name(self.device),
                capability=f"{props.major}.{props.minor}",
                multiprocessors=props.multi_processor_count,
                memory_total=total,
                memory_free_at_start=free,
                driver_cuda=torch._C._cuda_getDriverVersion()
                if hasattr(torch._C, "_cuda_getDriverVersion")
                else None,
            )
            if args.tf32:
                torch.backends.cuda.matmul.allow_tf32 = True
        else:
            env["device"] = (
                f"cpu ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"
            )
        env["float32_matmul_precision"] = torch.get_float32_matmul_precision()
        env["tf32_matmul"] = bool(torch.backends.cuda.matmul.allow_tf32)
        env["alloc_conf"] = os.environ.get("PYTORCH_CUDA_ALLOC_CONF")
        self.R["environment"] = env
        mem = (
            f", {env['memory_total'] / 2**30:.1f} GiB ({env['memory_free_at_start'] / 2**30:.1f} free)"
            if "memory_total" in env
            else ""
        )
        self.log(
            f"device {env['device']}{mem}; torch {env['torch']} (CUDA {env['torch_cuda']}), "
            f"transformers {env['transformers']}, Python {env['python']}"
        )

        preset = MODEL_PRESETS.get(args.preset)
        if preset is None:
            print(
                f"refused: unknown preset {args.preset!r} ({', '.join(MODEL_PRESETS)})", flush=True
            )
            self.R.update(status="refused", reason=f"unknown preset {args.preset}")
            return False
        vocab, seq = args.vocab, args.seq_len

        class RandomTokens:
            """Random tokens, the same for the same batch everywhere (a check replays them)."""

            split = "train"
            num_sequences = 1 << 30
            seq_len, vocab_size = seq, vocab

            def sequences(self, batch: Any) -> Any:
                g = torch.Generator().manual_seed(batch.start)
                return torch.randint(0, vocab, (len(batch), seq), generator=g)

            def close(self) -> None:
                pass

        self.tokens = RandomTokens()
        trainer_module.open_dataset = lambda spec, split="train": RandomTokens()
        self.spec = TrainingSpec(
            preset=args.preset,
            architecture=preset.architecture,
            hf_config=dict(preset.hf_config),
            vocab_size=vocab,
            max_seq_len=seq,
            data_location="random",
            cold_start_warmup_steps=0,
            distro=DistroSpec(
                compression_decay=0.999,
                compression_chunk=64,
                compression_topk=32,
                weight_decay=0.0,
                clip_grad_norm=1.0,
                quantize_1bit=True,
            ),
            lr=LrSpec(
                "Constant", 4e-4, 4e-4, 0, 0, 1000
            ),  # lr > 0 from step 0: every apply moves weights
        )
        parent = Path(args.scratch) if args.scratch else Path(tempfile.gettempdir())
        parent.mkdir(parents=True, exist_ok=True)
        self.scratch = Path(tempfile.mkdtemp(prefix="cohort-gpu-", dir=parent))
        self.host_baseline = _proc_status("VmRSS")
        return True

    # -- measuring --------------------------------------------------------------------------------

    def sync(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def clock(self) -> float:
        self.sync()
        return time.perf_counter()

    def reset_peaks(self) -> None:
        self.sync()
        if self.device.type == "cuda":
            self.torch.cuda.reset_peak_memory_stats(self.device)
        self.host_peak_resets = _reset_host_peak()

    def peaks(self) -> dict[str, int | None]:
        self.sync()
        out: dict[str, int | None] = {}
        if self.device.type == "cuda":
            out["gpu_allocated"] = self.torch.cuda.max_memory_allocated(self.device)
            out["gpu_reserved"] = self.torch.cuda.max_memory_reserved(self.device)
        hwm = _proc_status("VmHWM")
        base = self.host_baseline or 0
        out["host_rss"] = None if hwm is None else max(hwm - base, 0)
        return out

    def keep_peak(self, name: str, peak: dict[str, int | None]) -> None:
        """The larger of `peak` and what phase `name` already holds, per counter."""
        with self.lock:
            memory = self.R.setdefault("memory", {})
            held = memory.setdefault(name, {})
            for k, v in peak.items():
                if v is not None:
                    held[k] = max(held.get(k) or 0, v)

    def results_for(self, step: int, ours: bytes, others: list[bytes]) -> list[bytes]:
        """Our payload and RESULTS - 1 more of `step`: `others` (or ours) re-headed to `step` and to
        batches of their own (distinct commitments, as distinct members' results have)."""
        codec = self.replica.codec
        sources = (others + [ours] * RESULTS)[: RESULTS - 1]
        out = [ours]
        for i, payload in enumerate(sources):
            result = codec.decode(payload).result
            first = 1_000_000 + RESULTS * step + i
            out.append(
                codec.encode(replace(result, step=step, batch=self.BatchId(first, first + 1)))
            )
        return out

    def train(self, step: int, fit: bool = False) -> Any:
        """One `train` of step `step` over its own batch. `fit`: out of device memory, halve the
        micro-batch and try again (the replica restores its weights when a step fails)."""
        n = self.args.sequences
        while True:
            try:
                return self.replica.train(step, step * n, (step + 1) * n)
            except self.out_of_memory as e:
                if not fit:
                    raise
                size = self.replica.micro_batch_size or n
                if size <= 1:
                    raise DoesNotFit(
                        f"out of device memory at a micro-batch of 1 sequence: {str(e).splitlines()[0]}"
                    ) from None
                smaller = max(size // 2, 1)
                self.note(f"micro-batch {size} did not fit in device memory; trying {smaller}")
            gc.collect()
            if self.device.type == "cuda":
                self.torch.cuda.empty_cache()
            self.replica.micro_batch_size = smaller
            self.put("config", micro_batch=smaller)

    # -- phases -----------------------------------------------------------------------------------

    def build(self) -> None:
        self.current = "build"
        args = self.args
        self.reset_peaks()
        t = self.clock()
        self.replica = self.trainer_module.LocalReplica(
            self.spec,
            seed=1,
            device=str(self.device),
            micro_batch_size=args.micro_batch or args.sequences,
            scratch=self.scratch / "replica",
        )
        seconds = self.clock() - t
        self.keep_peak("build", self.peaks())
        model = self.replica.model
        self.params = sum(p.numel() for p in model.parameters())
        self.weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
        dtypes = sorted({str(p.dtype).removeprefix("torch.") for p in model.parameters()})
        cfg = model.config
        self.put(
            "config",
            preset=args.preset,
            architecture=self.spec.architecture,
            hidden=getattr(cfg, "hidden_size", None),
            layers=getattr(cfg, "num_hidden_layers", None),
            heads=getattr(cfg, "num_attention_heads", None),
            intermediate=getattr(cfg, "intermediate_size", None),
            tied=bool(getattr(cfg, "tie_word_embeddings", False)),
            vocab=args.vocab,
            params=self.params,
            weight_bytes=self.weight_bytes,
            dtype=",".join(dtypes),
            attention=getattr(cfg, "_attn_implementation", None),
            seq_len=args.seq_len,
            sequences=args.sequences,
            tokens_per_step=args.sequences * args.seq_len,
            micro_batch=self.replica.micro_batch_size,
            distro="chunk 64, top-32, 1-bit, decay 0.999, clip 1.0, lr 4e-4 constant",
            payload_bytes=self.replica.payload_size,
            state_bytes=self.state_bytes(),
            build_s=round(seconds, 2),
        )
        self.log(
            f"built {args.preset}: {self.params:,} parameters ({','.join(dtypes)}) on {self.device} in "
            f"{seconds:.1f} s; payload {_gb(self.replica.payload_size)}, committed state "
            f"{_gb(self.state_bytes())}"
        )

    def state_bytes(self) -> int:
        """The size of one committed optimizer state of this member (state.bin)."""
        from cohort.client.verify.state import state_size

        return state_size(self.replica.optimizer.layout, has_sent=True)

    def throughput(self) -> None:
        self.current = "throughput"
        args = self.args
        self.replica.start_epoch(0, cold=False, verified=False)
        self.history: list[bytes] = []  # our payload of every step, in order
        self.step_s: float | None = None
        steps: list[dict[str, Any]] = []
        self.next_step = 0
        for i in range(args.steps):
            if i >= 2 and self.elapsed() > THROUGHPUT_SHARE * args.deadline:
                self.note(
                    f"throughput stopped after {i} steps: {THROUGHPUT_SHARE:.0%} of the deadline"
                )
                break
            s = self.next_step
            self.current = f"throughput step {s}" + (" (warm-up)" if i == 0 else "")
            self.reset_peaks()
            t0 = self.clock()
            out = self.train(s, fit=True)
            t1 = self.clock()
            self.keep_peak("train" if i else "warm-up", self.peaks())
            payloads = self.results_for(s, out.payload, [])
            self.reset_peaks()
            t2 = self.clock()
            self.replica.apply(s, payloads)
            t3 = self.clock()
            self.keep_peak("apply" if i else "warm-up", self.peaks())
            between = (
                self.torch.cuda.memory_allocated(self.device)
                if self.device.type == "cuda"
                else None
            )
            self.history.append(out.payload)
            self.next_step = s + 1
            row = {
                "step": s,
                "warmup": i == 0,
                "train_s": t1 - t0,
                "apply_s": t3 - t2,
                "loss": out.loss,
                "tokens": out.tokens,
                "gpu_allocated_between_steps": between,
            }
            steps.append(row)
            self.put("throughput", steps=steps, micro_batch=self.replica.micro_batch_size)
            self.summarize(steps)
            self.log(
                f"step {s}{' (warm-up)' if i == 0 else ''}: train {row['train_s']:.3f} s, apply "
                f"{row['apply_s']:.3f} s, loss {out.loss:.3f}, micro-batch {self.replica.micro_batch_size}"
            )
            self.save()

    def summarize(self, steps: list[dict[str, Any]]) -> None:
        """Medians over the steps after the warm-up (kept current, so a deadline finds them)."""
        counted = [r for r in steps if not r["warmup"]]
        if not counted:
            self.step_s = steps[0]["train_s"] + steps[0]["apply_s"] if steps else None
            return
        train = [r["train_s"] for r in counted]
        apply = [r["apply_s"] for r in counted]
        whole = [r["train_s"] + r["apply_s"] for r in counted]
        tokens = counted[0]["tokens"]
        self.put(
            "throughput",
            counted_steps=len(counted),
            train_s=_median(train),
            train_min_s=min(train),
            apply_s=_median(apply),
            apply_min_s=min(apply),
            step_s=_median(whole),
            step_min_s=min(whole),
            tokens_per_step=tokens,
            tokens_per_s=tokens / _median(whole),
        )
        self.step_s = _median(whole)

    def forward_backward(self) -> None:
        """Forward/backward alone on this replica's model and micro-batches (no lookahead, generate or
        apply): how much of `train` the model itself takes. Gradients are dropped afterwards."""
        self.current = "forward/backward alone"
        if self.step_s is not None and self.skip("forward_backward", 3 * self.step_s):
            return
        model, n = self.replica.model, self.args.sequences
        tokens = self.tokens.sequences(self.BatchId(0, n)).to(self.device)
        size = self.replica.micro_batch_size or n
        times = []
        for _ in range(2):
            self.reset_peaks()
            try:
                t = self.clock()
                for chunk in tokens.split(size):
                    loss = self.lm_loss(model, chunk)
                    (loss * (len(chunk) / n)).backward()
                t = self.clock() - t
            finally:  # no gradients left behind for the replica's next step
                model.zero_grad(set_to_none=True)
            times.append(t)
            self.keep_peak("forward/backward alone", self.peaks())
        best = min(times)
        self.put("throughput", fwd_bwd_s=best, fwd_bwd_tokens_per_s=tokens.numel() / best)
        self.log(f"forward/backward alone: {best:.3f} s ({tokens.numel() / best:,.0f} tokens/s)")

    def check(self) -> None:
        """Verification on: two steps that commit their state, then `verify_step` of the second."""
        self.current = "check"
        state = self.state_bytes()
        io = 4 * self.weight_bytes + 6 * state  # snapshots, states, the check's stash, reads
        estimate = 3 * (self.step_s or 1.0) + io / IO_BYTES_PER_S
        if self.skip("check", estimate):
            return
        need = 3 * self.weight_bytes + 3 * state
        free = shutil.disk_usage(self.scratch).free
        if free < 1.1 * need:
            self.put(
                "check", skipped=f"disk: {_gb(free)} free under {self.scratch}, ~{_gb(need)} needed"
            )
            self.note(f"check skipped: {_gb(free)} free on disk, ~{_gb(need)} needed")
            return
        s = self.next_step
        self.replica.start_epoch(s, cold=False, verified=True)
        outs, seconds = [], []
        for step in (s, s + 1):
            self.current = f"check: step {step} with verification on"
            self.reset_peaks()
            t0 = self.clock()
            out = self.replica.train(
                step, step * self.args.sequences, (step + 1) * self.args.sequences
            )
            t1 = self.clock()
            self.keep_peak("train, verification on", self.peaks())
            self.replica.apply(step, self.results_for(step, out.payload, []))
            t2 = self.clock()
            outs.append(out)
            seconds.append((t1 - t0, t2 - t1))
            self.history.append(out.payload)
            self.log(f"step {step}, verification on: train {t1 - t0:.3f} s, apply {t2 - t1:.3f} s")
        self.next_step = s + 2
        self.put(
            "check",
            verified_train_s=[a for a, _ in seconds],
            verified_apply_s=[b for _, b in seconds],
        )
        self.current = "check: reading the committed states"

        t = time.perf_counter()
        seed = b"a check seed"
        manifests = [outs[0].state.manifest.encode(), outs[1].state.manifest.encode()]
        wanted = set(self.replica.check_parts(seed, *manifests))
        parts = outs[0].state.read_parts(wanted) | outs[1].state.read_parts(wanted)
        before, after = [sum(f.size for f in o.state.manifest.files) for o in outs]
        read_s = time.perf_counter() - t
        self.current = "check: verify_step"
        self.reset_peaks()
        t = self.clock()
        verdict = self.replica.verify_step(s + 1, outs[1].payload, outs[0].payload, seed, manifests[0], parts,
                                           manifests[1], parts)  # fmt: skip
        check_s = self.clock() - t
        self.keep_peak("check (verify_step)", self.peaks())
        passed = None if verdict is None else bool(verdict.passed)
        self.put(
            "check",
            step=s + 1,
            state_bytes=[before, after],
            fetched_bytes=sum(len(p) for p in parts.values()) + sum(len(m) for m in manifests),
            read_states_s=read_s,
            verify_step_s=check_s,
            verify_vs_step=check_s / self.step_s if self.step_s else None,
            passed=passed,
            reason=None if verdict is None else verdict.reason,
            metrics=None if verdict is None else dict(getattr(verdict, "metrics", {}) or {}),
        )
        self.log(
            f"verify_step of step {s + 1}: {'passed' if passed else 'NOT PASSED'} in {check_s:.2f} s "
            f"({'' if verdict is None else verdict.reason})"
        )
        del before, after
        self.replica.start_epoch(self.next_step, cold=False, verified=False)  # drops the snapshots
        gc.collect()

    def cross(self) -> None:
        """One step's results applied here and on a CPU replica with the same weights: same digest?"""
        self.current = "cross-hardware apply"
        torch = self.torch
        step_s = self.step_s or 1.0
        estimate = 2 * step_s + 5 * self.weight_bytes / IO_BYTES_PER_S + self.params / 20e6
        if self.skip("cross", estimate):
            return
        s = self.next_step
        out = self.replica.train(s, s * self.args.sequences, (s + 1) * self.args.sequences)
        # distinct results: ours and the last steps' results, re-headed to this step
        payloads = self.results_for(s, out.payload, self.history[-(RESULTS - 1) :][::-1])
        self.history.append(out.payload)
        self.next_step = s + 1
        threads = torch.get_num_threads()
        other_threads = 1 if self.device.type == "cpu" else threads
        label = (
            f"{self.device.type} vs cpu ({other_threads} thread{'s' if other_threads > 1 else ''})"
        )
        if self.device.type == "cpu":
            label = f"cpu ({threads} threads) vs cpu (1 thread)"
        self.current = "cross-hardware apply: the CPU replica"
        t = time.perf_counter()
        other = self.trainer_module.LocalReplica(
            self.spec,
            seed=2,
            device="cpu",
            micro_batch_size=self.replica.micro_batch_size,
            scratch=self.scratch / "cpu-replica",
        )
        with torch.no_grad():
            other.model.load_state_dict(self.replica.model.state_dict())
        build_s = time.perf_counter() - t
        before, before_other = self.replica.checksum(), other.checksum()
        self.current = "cross-hardware apply: apply"
        t = self.clock()
        self.replica.apply(s, payloads)
        here_s = self.clock() - t
        torch.set_num_threads(other_threads)
        try:
            t = time.perf_counter()
            other.apply(s, payloads)
            other_s = time.perf_counter() - t
        finally:
            torch.set_num_threads(threads)
        self.current = "cross-hardware apply: digests"
        t = time.perf_counter()
        digest, digest_other = self.replica.digest(), other.digest()
        digest_s = time.perf_counter() - t
        moved = self.replica.checksum() != before
        equal = digest == digest_other
        self.put(
            "cross",
            step=s,
            compared=label,
            results=len(payloads),
            weights_equal_before=before == before_other,
            apply_moved_weights=moved,
            digest=digest,
            digest_other=digest_other,
            equal=equal,
            apply_s=here_s,
            apply_other_s=other_s,
            build_other_s=build_s,
            digests_s=digest_s,
        )
        self.log(
            f"cross-hardware apply ({label}): digests {'EQUAL' if equal else 'DIFFERENT'} "
            f"({digest[:16]}… / {digest_other[:16]}…); weights equal before: {before == before_other}, "
            f"apply moved them: {moved}"
        )
        del other
        gc.collect()

    # -- the table --------------------------------------------------------------------------------

    def mfu(self) -> None:
        """MFU = 6 x params x tokens/s / peak (attention's own FLOPs not counted; embeddings counted)."""
        env, tp = self.R.get("environment", {}), self.R.get("throughput", {})
        peaks = None
        if self.args.peak:
            fp32, tf32, bf16 = (float(x) for x in self.args.peak.split(","))
            peaks = ("the card given by --peak", fp32, tf32, bf16)
        elif getattr(self, "device", None) is not None and self.device.type == "cuda":
            name = env.get("device", "")
            for key, card, fp32, tf32, bf16 in PEAKS:
                if key in name:
                    peaks = (card, fp32, tf32, bf16)
                    break
        if peaks is None or not tp.get("tokens_per_s"):
            self.put(
                "mfu",
                available=False,
                why="no peak known for this device" if peaks is None else "no steps",
            )
            return
        card, fp32, tf32, bf16 = peaks
        dtype = self.R.get("config", {}).get("dtype", "")
        if "bfloat16" in dtype:
            divide_by, why = "bf16", "the weights are bf16"
        elif env.get("tf32_matmul") or env.get("float32_matmul_precision") in ("high", "medium"):
            divide_by, why = (
                "tf32",
                "fp32 weights with TF32 matmuls allowed (not the run's precision)",
            )
        else:
            divide_by, why = (
                "fp32",
                "the replica is fp32 and its matmuls run in fp32 (TF32 off, matmul precision "
                f"{env.get('float32_matmul_precision')!r}): the CUDA cores' fp32 peak is what it can reach; "
                "bf16 shows the distance to a bf16 run",
            )
        flops_per_token = 6 * self.params
        rows = {}
        for label, tokens_per_s in (
            ("whole_step", tp.get("tokens_per_s")),
            ("fwd_bwd_alone", tp.get("fwd_bwd_tokens_per_s")),
        ):
            if tokens_per_s:
                achieved = flops_per_token * tokens_per_s / 1e12
                rows[label] = {
                    "tflops": achieved,
                    "fp32": achieved / fp32,
                    "tf32": achieved / tf32,
                    "bf16": achieved / bf16,
                }
        self.put(
            "mfu",
            available=True,
            card=card,
            peak_tflops={"fp32": fp32, "tf32": tf32, "bf16": bf16},
            divide_by=divide_by,
            why=why,
            flops_per_token=flops_per_token,
            rows=rows,
        )

    def report(self) -> None:
        R = self.R
        env, cfg, tp = R.get("environment", {}), R.get("config", {}), R.get("throughput", {})
        try:
            self.mfu()
        except Exception as e:  # the table must print whatever happened
            R["mfu"] = {"available": False, "why": f"{type(e).__name__}: {e}"}
        mfu = R.get("mfu", {})
        w = print
        w("")
        w("=" * 100)
        w(f"cohort member on one device: {env.get('device', '?')}")
        w(
            f"  torch {env.get('torch')} (CUDA {env.get('torch_cuda')}), transformers "
            f"{env.get('transformers')}, Python {env.get('python')}; matmul precision "
            f"{env.get('float32_matmul_precision')}, TF32 {'on' if env.get('tf32_matmul') else 'off'}"
        )
        if cfg.get("params"):
            w(
                f"  model {cfg['preset']}: {cfg['params']:,} parameters ({cfg.get('dtype')}), hidden "
                f"{cfg.get('hidden')}, {cfg.get('layers')} layers, {cfg.get('heads')} heads, ffn "
                f"{cfg.get('intermediate')}, {'tied' if cfg.get('tied') else 'untied'}, vocab "
                f"{cfg.get('vocab')}, attention {cfg.get('attention')}"
            )
            w(
                f"  a step: {cfg.get('sequences')} x {cfg.get('seq_len')} tokens in micro-batches of "
                f"{cfg.get('micro_batch')}; DisTrO {cfg.get('distro')}; payload "
                f"{_gb(cfg.get('payload_bytes'))}, committed state {_gb(cfg.get('state_bytes'))}"
            )
        if tp.get("counted_steps"):
            w("")
            w(f"throughput ({tp['counted_steps']} steps after a warm-up)     median       min")
            rows = [
                ("train: lookahead+fwd/bwd+generate+encode", "train_s", "train_min_s"),
                ("apply of 4 results", "apply_s", "apply_min_s"),
                ("whole step (train + apply)", "step_s", "step_min_s"),
            ]
            for label, med, low in rows:
                w(f"  {label:<42} {tp[med]:8.3f} s {tp[low]:8.3f} s")
            if tp.get("fwd_bwd_s"):
                w(f"  {'forward/backward alone (same micro-batches)':<42} {tp['fwd_bwd_s']:8.3f} s")
                w(
                    f"  {'lookahead+generate+encode (train - fwd/bwd)':<42} "
                    f"{tp['train_s'] - tp['fwd_bwd_s']:8.3f} s   ="
                    f" {(tp['train_s'] - tp['fwd_bwd_s']) / tp['fwd_bwd_s']:.2f} x fwd/bwd; apply "
                    f"= {tp['apply_s'] / tp['fwd_bwd_s']:.2f} x fwd/bwd"
                )
            w(f"  tokens/s, whole step: {tp['tokens_per_s']:,.0f}", end="")
            if tp.get("fwd_bwd_tokens_per_s"):
                w(f"; forward/backward alone: {tp['fwd_bwd_tokens_per_s']:,.0f}")
            else:
                w("")
        elif tp.get("steps"):
            w("")
            w("throughput: only the warm-up step ran")
        if mfu.get("available"):
            p = mfu["peak_tflops"]
            w("")
            w(
                f"MFU = 6 x params x tokens/s / peak; {mfu['card']} dense peaks: fp32 {p['fp32']:g}, "
                f"tf32 {p['tf32']:g}, bf16 {p['bf16']:g} TFLOP/s"
            )
            w(f"  divided by the {mfu['divide_by']} peak: {mfu['why']}")
            w(f"  {'':<24} {'TFLOP/s':>8} {'vs fp32':>8} {'vs tf32':>8} {'vs bf16':>8}")
            for label, r in mfu["rows"].items():
                w(
                    f"  {label.replace('_', ' '):<24} {r['tflops']:8.2f} {r['fp32']:8.1%} "
                    f"{r['tf32']:8.1%} {r['bf16']:8.1%}"
                )
        elif mfu:
            w("")
            w(
                f"MFU: not computed ({mfu.get('why')}; --peak FP32,TF32,BF16 gives the card's TFLOP/s)"
            )
        memory, params = R.get("memory", {}), cfg.get("params")
        if memory and params:
            w("")
            w(
                "peak memory, bytes per parameter      GPU allocated  GPU reserved   host RSS"
                + ("" if self.host_peak_resets else " (cumulative)")
            )
            for name, m in memory.items():

                def bpp(key: str, m: dict = m) -> str:
                    v = m.get(key)
                    return f"{v / params:13.1f}" if v is not None else f"{'—':>13}"

                w(f"  {name:<35} {bpp('gpu_allocated')} {bpp('gpu_reserved')} {bpp('host_rss')}")
            between = [
                r["gpu_allocated_between_steps"]
                for r in tp.get("steps", [])
                if r.get("gpu_allocated_between_steps")
            ]
            if between:
                w(f"  {'between steps (allocated)':<35} {max(between) / params:13.1f}")
            w("  (the algorithm's minimum with fp32 weights, gradients and momentum: 12 B/param)")
        ck = R.get("check", {})
        if ck:
            w("")
            if ck.get("skipped") or ck.get("error"):
                w(
                    f"check: {'skipped: ' + ck['skipped'] if ck.get('skipped') else 'failed: ' + ck['error']}"
                )
            if ck.get("verified_train_s"):
                tr = ck["verified_train_s"]
                base = tp.get("train_s")
                ratio = f" ({min(tr) / base:.2f} x without)" if base else ""
                w(
                    f"check: train with verification on (snapshot + state commit): "
                    f"{', '.join(f'{x:.3f}' for x in tr)} s{ratio}"
                )
            if ck.get("verify_step_s") is not None:
                vs = (
                    f" = {ck['verify_vs_step']:.1f} x a whole step"
                    if ck.get("verify_vs_step")
                    else ""
                )
                w(
                    f"  verify_step of step {ck['step']}: "
                    f"{'passed' if ck.get('passed') else 'NOT PASSED'} in {ck['verify_step_s']:.2f} s{vs}; "
                    f"of the two states ({_gb(sum(ck['state_bytes']))}) it fetched {_gb(ck.get('fetched_bytes'))} "
                    f"(read from disk in {ck['read_states_s']:.1f} s); {ck.get('reason')}"
                )
        cx = R.get("cross", {})
        if cx:
            w("")
            if cx.get("skipped") or cx.get("error"):
                w(f"cross-hardware apply: {cx.get('skipped') or 'failed: ' + cx['error']}")
            if "equal" in cx:
                w(
                    f"cross-hardware apply of step {cx['step']} ({cx['results']} distinct results, "
                    f"{cx['compared']}): digests {'EQUAL' if cx['equal'] else 'DIFFERENT'}"
                )
                w(
                    f"  weights equal before: {cx['weights_equal_before']}; the apply moved them: "
                    f"{cx['apply_moved_weights']}; apply {cx['apply_s']:.3f} s here, "
                    f"{cx['apply_other_s']:.3f} s on the CPU; digest {cx['digest'][:16]}… / "
                    f"{cx['digest_other'][:16]}…"
                )
        for n in R.get("notes", []):
            w(f"note: {n}")
        for section in ("build", "throughput", "forward_backward"):
            if R.get(section, {}).get("error"):
                w(f"{section} failed: {R[section]['error']}")
        status = (
            R["status"] if R["status"] != "running" else ("failed" if self.errors else "complete")
        )
        reason = f" ({R['reason']})" if R.get("reason") else ""
        w(f"status: {status}{reason}; {self.elapsed():.0f} s")
        if self.json_path is not None:
            w(f"results: {self.json_path}")
        w("=" * 100, flush=True)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--device", default="cuda", help="cuda (default), cuda:N or cpu")
    p.add_argument(
        "--quick", action="store_true", help="a small model and batch: a dry run in about a minute"
    )
    p.add_argument("--preset", help="a model preset of cohort.sdk.presets (default llama-1b)")
    p.add_argument("--vocab", type=int, default=32_000)
    p.add_argument("--seq-len", type=int, help="tokens a sequence (default 2048)")
    p.add_argument("--sequences", type=int, help="sequences a step (default 8)")
    p.add_argument(
        "--micro-batch",
        type=int,
        help="sequences a forward/backward (default: the whole step, halved while it does not fit)",
    )
    p.add_argument("--steps", type=int, help="training steps, the first a warm-up (default 6)")
    p.add_argument(
        "--deadline", type=float, default=450.0, help="seconds from the start (default 450)"
    )
    p.add_argument("--no-check", action="store_true", help="skip the verification check")
    p.add_argument("--no-cross", action="store_true", help="skip the cross-hardware apply")
    p.add_argument(
        "--tf32", action="store_true", help="allow TF32 matmuls (not the run's precision)"
    )
    p.add_argument(
        "--peak", help="the card's dense peak TFLOP/s as FP32,TF32,BF16 (default: a table)"
    )
    p.add_argument("--scratch", help="where verification's files go (default: the temp directory)")
    p.add_argument("--json", help="results file (default: $OUT/gpu.json when OUT is set)")
    args = p.parse_args(argv)
    for key, value in (QUICK if args.quick else FULL).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.steps < 1 or args.sequences < 1 or args.seq_len < 2:
        p.error("--steps, --sequences >= 1 and --seq-len >= 2")
    return args


def run_phases(bench: Bench) -> int:
    args = bench.args
    try:
        bench.build()
    except Exception as e:
        bench.failed("build", e)
        return bench.finish()
    bench.save()
    try:
        bench.throughput()
    except DoesNotFit as e:
        bench.put("throughput", error=str(e))
        bench.note(f"does not fit: {e}")
        bench.errors += 1
        return bench.finish()
    except Exception as e:
        bench.failed("throughput", e)
        return bench.finish()
    bench.save()
    for name, run, wanted in (
        ("forward_backward", bench.forward_backward, True),
        ("check", bench.check, not args.no_check),
        ("cross", bench.cross, not args.no_cross),
    ):
        if not wanted:
            continue
        try:
            run()
        except Exception as e:
            bench.failed(name, e)
            if bench.device.type == "cuda":
                gc.collect()
                bench.torch.cuda.empty_cache()
        bench.save()
    return bench.finish()


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    bench = Bench(args)
    bench.host_peak_resets = True
    bench.arm()
    if not bench.setup():
        bench.save()
        return 2
    try:
        return run_phases(bench)
    finally:
        shutil.rmtree(bench.scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
