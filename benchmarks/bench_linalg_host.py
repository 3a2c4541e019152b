"""Times NumPy/SciPy LAPACK (cholesky, qr, eigh, svd) on this machine and prints them beside the CPU model's
prediction for ``--hardware host`` (``python benchmarks/bench_linalg_host.py [sizes...]``), then the time per
row-sweep of LAPACK ``dsterf`` (the source of ``efficiency.linalg_sweep_row_s``: a tridiagonal QR iteration makes
about two sweeps per eigenvalue over shrinking blocks, ``n (n + 1)`` row-sweeps in all). Prints, asserts nothing;
run it with ``OMP_NUM_THREADS=1`` for one-thread figures."""

from __future__ import annotations

import sys
import time

import numpy as np


def _best(fn, reps: int = 5) -> float:
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main(sizes: list[int]) -> None:
    import scipy.linalg as sla
    from scipy.linalg import lapack

    from simulator.engines.analytical import evaluate
    from simulator.hardware import load_hardware
    from workloads.micro import build_micro

    host = load_hardware("host")
    rng = np.random.default_rng(0)
    print(f"{'op':28s} {'measured':>12s} {'model':>12s} {'model/meas':>10s}")
    for n in sizes:
        a = rng.standard_normal((n, n))
        spd = a @ a.T + n * np.eye(n)
        af = np.asfortranarray(a)
        sf = np.asfortranarray(spd)
        cases = {  # the LAPACK drivers the model follows, called directly (no wrapper checks or copies)
            f"cholesky:n={n}": lambda s=sf: lapack.dpotrf(s, lower=1),
            f"qr:m={n},n={n}": lambda x=af: lapack.dorgqr(*lapack.dgeqrf(x)[:2]),
            f"eigh:n={n}": lambda s=sf: lapack.dsyevd(s, compute_v=1),
            f"eigh:n={n},vectors=0": lambda s=sf: lapack.dsyevd(s, compute_v=0),
            f"svd:m={n},n={n}": lambda x=af: sla.svd(x, full_matrices=False, lapack_driver="gesvd", check_finite=False),
            f"svd:m={n},n={n},vectors=0": lambda x=af: sla.svd(x, compute_uv=False, lapack_driver="gesvd",
                                                               check_finite=False),
        }
        for spec, fn in cases.items():
            meas = _best(fn)
            model = evaluate(build_micro(spec, "fp64"), host).totals.latency_s
            print(f"{spec:28s} {meas * 1e3:10.2f} ms {model * 1e3:10.2f} ms {model / meas:10.2f}")
    for n in (1024, 2048, 4096):
        d, e = rng.standard_normal(n), rng.standard_normal(n - 1)
        t = _best(lambda d=d, e=e: lapack.dsterf(d.copy(), e.copy()))
        print(f"dsterf n={n}: {t * 1e3:.1f} ms, {t / (n * (n + 1)) * 1e9:.2f} ns per row-sweep")


if __name__ == "__main__":
    main([int(x) for x in sys.argv[1:]] or [256, 512, 1024])
