"""Time the key/value exchanges of PyTorch's ring attention at the sizes of torchtitan's Llama 3.1 8B
context-parallel rows (published_training.csv train-015/017/019), over groups of 2, 4 and 8 GPUs of one host.

    torchrun --nproc-per-node 8 benchmarks/bench_ring_exchanges.py [--out FILE.csv]

What each layer pass of those rows exchanges (torch/distributed/tensor/experimental/_attention.py of torch
1963fc8's month, the ``allgather`` rotate method torchtitan 9dec370 sets): the forward, its full-recompute
replay and the backward each all-gather ``cat(key, value)`` of the rank's 32,768 tokens (32 heads after
``repeat_kv``, head dim 128, bf16: 512 MiB) over the context-parallel group; the backward then passes the fp32
``cat(grad_key, grad_value)`` (1 GiB) to the next rank once per ring step, ``ft_c.permute_tensor``, which is an
``all_to_all_single`` whose whole buffer goes to one peer. torchtitan's ``cp`` mesh dimension is the innermost
one, so a group is consecutive ranks.

The model prices these at NVLink rates and the 8B rows fit at CP 2 but lack about 3.2 s a ring step at CP 4 and
CP 8 (docs/training.md, "sixth pass"); read per received byte that is one rate at CP 4 and CP 8 and none at
CP 2. This prints, for each group size, the median time of each exchange alone (CUDA events, after warm-up)
and the bytes per second each rank receives, the figures that say whether the exchanges of 4 and 8 ranks run
at the rate of 2. Nothing to time (torch not importable, no CUDA device, fewer than 2 ranks): prints why on
stderr and exits 1.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import sys

#: bytes a rank sends per exchange: bf16 keys + values of 32 heads x 32,768 tokens x 128, and their fp32 gradients
KV_BYTES = 2 * 32 * 32768 * 128 * 2
DKV_BYTES = 2 * KV_BYTES


def _median_s(fn, torch, dist, reps: int = 5) -> float:
    """Median seconds of ``fn`` over ``reps`` runs after two warm-up runs, every rank starting together."""
    for _ in range(2):
        fn()
    times = []
    for _ in range(reps):
        dist.barrier()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    return statistics.median(times)


def _cases(n: int, group, torch, dist) -> list[tuple[str, float, float]]:
    """(exchange, seconds, bytes received by a rank) of the all-gather and the permute over ``group``."""
    me = dist.get_rank(group)
    kv = torch.empty(KV_BYTES // 2, dtype=torch.bfloat16, device="cuda")
    gathered = torch.empty(n * kv.numel(), dtype=torch.bfloat16, device="cuda")
    dkv = torch.empty(DKV_BYTES // 4, dtype=torch.float32, device="cuda")
    received = torch.empty_like(dkv)
    send = [dkv.numel() if peer == (me + 1) % n else 0 for peer in range(n)]
    recv = [dkv.numel() if peer == (me - 1) % n else 0 for peer in range(n)]
    gather_s = _median_s(lambda: dist.all_gather_into_tensor(gathered, kv, group=group), torch, dist)
    permute_s = _median_s(lambda: dist.all_to_all_single(received, dkv, recv, send, group=group), torch, dist)
    return [("all_gather kv", gather_s, (n - 1) * KV_BYTES), ("permute dkv", permute_s, DKV_BYTES)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="also write the rows as CSV to this file")
    args = parser.parse_args()
    try:
        import torch
        import torch.distributed as dist
    except ImportError as exc:
        print(f"torch is not importable ({exc}); nothing to time", file=sys.stderr)
        return 1
    if not torch.cuda.is_available():
        print("no CUDA device; nothing to time", file=sys.stderr)
        return 1
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))  # torchrun's local rank, before NCCL binds
    dist.init_process_group("nccl")
    world, rank = dist.get_world_size(), dist.get_rank()
    if world < 2:
        print("one rank: run under torchrun --nproc-per-node 2 or more", file=sys.stderr)
        return 1
    rows = []
    for n in (s for s in (2, 4, 8) if s <= world and world % s == 0):
        groups = [dist.new_group(list(range(g, g + n))) for g in range(0, world, n)]  # every rank makes each
        for name, seconds, nbytes in _cases(n, groups[rank // n], torch, dist):
            rows.append({"ranks": n, "exchange": name, "median_ms": round(seconds * 1e3, 3),
                         "received_gb_per_s": round(nbytes / seconds / 1e9, 1)})
    if rank == 0:
        for r in rows:
            print(f"{r['ranks']} ranks  {r['exchange']:<14} {r['median_ms']:9.3f} ms  {r['received_gb_per_s']:7.1f} GB/s")
        if args.out:
            with open(args.out, "w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=list(rows[0]))
                writer.writeheader()
                writer.writerows(rows)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
