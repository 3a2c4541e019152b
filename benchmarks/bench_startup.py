"""Start-up speed of the command line: whole-process wall times, minimum of N runs (no assertions).

Goals (issue 25): ``nodeperf --version`` <= 0.15 s whole process; the README's main job
(``nodeperf predict llama-2-7b --hardware h100-sxm5-80gb --phase decode --batch 1 --context 2048``)
<= 0.30 s. Also timed: ``nodeperf --help`` and a bare ``python -c "import simulator"`` (and, for
reference, ``python -c "pass"``: the interpreter's own start-up, which every figure includes).

Each case runs as a fresh process (``python -m simulator.cli ...``, the code of this checkout: the
repository root goes first on ``PYTHONPATH``); the minimum over ``--repeat`` runs is the figure that
noise from other processes disturbs least. Byte code is cached, as in an installed package, in a
folder of its own under the temporary directory (``--no-bytecode-cache`` compiles every module from
source in every run instead, as under ``PYTHONDONTWRITEBYTECODE=1``). ``--importtime`` also prints the slowest imports of the
main job (``python -X importtime``), cumulative, which is where to look when a figure regresses.

Run: ``python benchmarks/bench_startup.py [--repeat N] [--importtime]``.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAIN_JOB = ("predict", "llama-2-7b", "--hardware", "h100-sxm5-80gb", "--phase", "decode", "--batch", "1",
            "--context", "2048")
CASES: list[tuple[str, list[str], str]] = [
    ("python -c pass (interpreter only)", ["-c", "pass"], ""),
    ("import simulator", ["-c", "import simulator"], ""),
    ("import nodeperf; nodeperf.evaluate", ["-c", "import nodeperf; nodeperf.evaluate"], ""),
    ("nodeperf --version", ["-m", "simulator.cli", "--version"], "0.15 s"),
    ("nodeperf --help", ["-m", "simulator.cli", "--help"], ""),
    ("nodeperf predict (README main job)", ["-m", "simulator.cli", *MAIN_JOB], "0.30 s"),
]


PYCACHE = Path(tempfile.gettempdir()) / "nodeperf-bench-startup-pycache"


def _env(bytecode_cache: bool = True) -> dict[str, str]:
    """The children's environment: this checkout first on the path; byte code cached (as an installed
    package has it) in a folder of its own outside the repository, or never written (``bytecode_cache``
    false: every module compiled from source, as under ``PYTHONDONTWRITEBYTECODE``)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if bytecode_cache:
        env["PYTHONPYCACHEPREFIX"] = str(PYCACHE)
    else:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def whole_process_s(args: list[str], repeat: int, bytecode_cache: bool = True) -> float:
    """Minimum wall time (s) of ``python ARGS`` over ``repeat`` fresh processes (one untimed run first)."""
    env = _env(bytecode_cache)
    best = float("inf")
    for i in range(repeat + 1):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, *args], env=env, cwd=ROOT, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        if i:  # the first run warms the file cache and the byte-code cache
            best = min(best, time.perf_counter() - t0)
    return best


def slowest_imports(args: list[str], top: int = 15) -> list[tuple[int, str]]:
    """(cumulative microseconds, module) of the ``top`` slowest imports of ``python ARGS``."""
    res = subprocess.run([sys.executable, "-X", "importtime", *args], env=_env(), cwd=ROOT, check=True,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    rows = []
    for line in res.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cumulative, name = (part.strip() for part in line[len("import time:"):].split("|"))
        rows.append((int(cumulative), name))
    return sorted(rows, reverse=True)[:top]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7, help="runs per case (the minimum is printed)")
    ap.add_argument("--importtime", action="store_true", help="also list the main job's slowest imports")
    ap.add_argument("--no-bytecode-cache", dest="bytecode_cache", action="store_false",
                    help="compile every module from source in every run (PYTHONDONTWRITEBYTECODE)")
    args = ap.parse_args()
    cache = "byte code cached" if args.bytecode_cache else "no byte code cache"
    print(f"machine: {platform.machine()} {platform.processor() or ''}, {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}; whole process, min of {args.repeat} runs, {cache}")
    for name, argv, goal in CASES:
        t = whole_process_s(argv, args.repeat, args.bytecode_cache)
        print(f"  {name:<40} {t:6.3f} s" + (f"  (goal <= {goal})" if goal else ""))
    if args.importtime:
        print("slowest imports of the main job (cumulative):")
        for us, mod in slowest_imports(["-m", "simulator.cli", *MAIN_JOB]):
            print(f"  {us / 1e3:7.1f} ms  {mod}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
