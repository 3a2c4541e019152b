"""Time PyTorch SDPA's attention kernels at the per-step shapes of torchtitan's context-parallel rows
(published_training.csv train-013..020, 029..036), forward and backward, with the GPU's power draw and SM
clock while they run, on one NVIDIA GPU.

    python benchmarks/bench_ring_attention_shapes.py [--backend flash|cudnn|efficient] [--out FILE.csv]

What the rows launch (torchtitan 9dec370, torch 1963fc8): ``F.scaled_dot_product_attention(xq, xk, xv,
is_causal=True)`` on bf16 heads of 128 after ``repeat_kv`` (torchtitan/models/llama/model.py), inside
``sdpa_kernel([FLASH_ATTENTION, EFFICIENT_ATTENTION])`` when context parallelism is on
(torchtitan/utils.py ``get_train_context``); PyTorch's load-balanced ring (``_cp_options.enable_load_balance``
True) then runs, per layer and rank, one causal call of the local ``seq / cp`` queries over the local keys and
``cp - 1`` non-causal calls of half a square each (all local queries over half a chunk of keys, or half the
queries over a whole chunk). Each rank holds 32,768 tokens in every row. The cases below are those calls for
Llama 3.1 8B (32 heads) and 405B under TP 8 (16 heads), batch 1.

Prints one line per case and pass: shape, median time of CUDA-event timings after warm-up, TFLOP/s (4 x sq x
skv x d x heads, half of it causal, x 2.5 backward: the FlashAttention papers' convention), and the mean power
(W) and SM clock (MHz) sampled from NVML through ``torch.cuda.power_draw`` / ``torch.cuda.clock_rate`` over
the timed repetitions. Read against ``power.limit`` of ``nvidia-smi -q -d POWER``: a kernel that draws the
limit runs below its clock, which the FlashAttention-3 paper's 700 W FA2 figures do not show.
Nothing to time (torch not importable, no CUDA device): prints why on stderr and exits 1, as
benchmarks/bench_fp8_linear_shapes.py does.
"""

from __future__ import annotations

import argparse
import csv
import sys
import threading

#: (case, heads, query tokens, key tokens, causal): the local causal call (step 0 of the ring, and the whole
#: attention of the CP 1 rows) and the two half-square shapes of the other steps, for 32 and 16 heads
CASES = [
    ("8b-step0-causal", 32, 32768, 32768, True), ("8b-step-kvhalf", 32, 32768, 16384, False),
    ("8b-step-qhalf", 32, 16384, 32768, False),
    ("405b-tp8-step0-causal", 16, 32768, 32768, True), ("405b-tp8-step-kvhalf", 16, 32768, 16384, False),
]
HEAD_DIM = 128


def _sampled(fn, torch, reps: int = 8) -> tuple[float, float, float]:
    """(median seconds, mean W, mean SM MHz) of ``fn`` after warm-up; NVML sampled every 20 ms meanwhile."""
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    samples: list[tuple[float, float]] = []
    stop = threading.Event()

    def _poll() -> None:
        while not stop.wait(0.02):
            samples.append((torch.cuda.power_draw() / 1e3, float(torch.cuda.clock_rate())))

    poller = threading.Thread(target=_poll, daemon=True)
    poller.start()
    out = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b) / 1e3)
    stop.set()
    poller.join()
    out.sort()
    n = max(1, len(samples))
    return out[len(out) // 2], sum(w for w, _ in samples) / n, sum(c for _, c in samples) / n


def _case(torch, backend, heads: int, sq: int, skv: int, causal: bool) -> list[tuple[str, float, float, float]]:
    """[(pass, seconds, W, MHz)] of the forward and the backward of one SDPA call under ``backend``."""
    from torch.nn.attention import sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    dev = torch.device("cuda")
    # (batch, seq, heads, dim) transposed to (batch, heads, seq, dim), as the model code hands them to SDPA
    q, k, v = (torch.randn(1, s, heads, HEAD_DIM, device=dev, dtype=torch.bfloat16).transpose(1, 2).requires_grad_()
               for s in (sq, skv, skv))
    with sdpa_kernel([backend]):
        fwd = _sampled(lambda: sdpa(q, k, v, is_causal=causal), torch)
        o = sdpa(q, k, v, is_causal=causal)
        g = torch.randn_like(o)
        bwd = _sampled(lambda: torch.autograd.grad(o, (q, k, v), g, retain_graph=True), torch)
    return [("fwd", *fwd), ("bwd", *bwd)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="flash", choices=("flash", "cudnn", "efficient"))
    ap.add_argument("--out", default="")
    args = ap.parse_args(argv)
    try:
        import torch
        from torch.nn.attention import SDPBackend
    except ImportError:
        print("torch (with torch.nn.attention) is not importable: nothing to time", file=sys.stderr)
        return 1
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to time", file=sys.stderr)
        return 1
    backend = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
               "efficient": SDPBackend.EFFICIENT_ATTENTION}[args.backend]
    print(f"# {torch.cuda.get_device_name(0)} torch {torch.__version__} cuda {torch.version.cuda} SDPA {args.backend}")
    rows = []
    for name, heads, sq, skv, causal in CASES:
        flops = 4.0 * sq * skv * HEAD_DIM * heads * (0.5 if causal else 1.0)
        for pass_, t, watts, mhz in _case(torch, backend, heads, sq, skv, causal):
            f = flops * (2.5 if pass_ == "bwd" else 1.0)
            rows.append((name, heads, sq, skv, int(causal), pass_, t, f / t / 1e12, watts, mhz))
            print(f"{name:22s} h={heads:2d} q={sq:6d} kv={skv:6d} causal={int(causal)} {pass_}  {t * 1e3:8.2f} ms "
                  f"{f / t / 1e12:6.1f} TF/s  {watts:5.0f} W  {mhz:5.0f} MHz", flush=True)
    if args.out:
        with open(args.out, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["case", "heads", "seq_q", "seq_kv", "causal", "pass", "seconds", "tflops", "watts", "sm_mhz"])
            w.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
