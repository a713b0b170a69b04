"""What calling meshwork from Python costs: all_reduce of 4 KiB and of
16 MiB (float32), called from Python (``g.all_reduce(a)`` in a Python
loop) and from Rust (the same ``ProcessGroup::all_reduce`` in a Rust loop,
``meshwork._meshwork._rust_all_reduce_loop``), on the same group, arrays
and processes, in alternating rounds.

    meshrun -n 2 -- python examples/python/bench.py

Rank 0 prints, per size, the median over rounds of the time per call
(the slowest rank's, each round) from Rust and from Python, the gap and
the ratio. The issue's goal: within 10 us at 4 KiB, within 3 % at 16 MiB.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import meshwork
from meshwork._meshwork import _rust_all_reduce_loop

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--rounds", type=int, default=7)
parser.add_argument("--quick", action="store_true", help="a few calls each, to check it runs")
args = parser.parse_args()

SIZES = [(4 << 10, 2000), (16 << 20, 20)]  # (bytes, calls per round)
g = meshwork.connect()


def slowest(seconds: float) -> float:
    """The largest of every rank's `seconds`."""
    t = np.array([seconds])
    g.all_reduce(t, op="max")
    return float(t[0])


def python_loop(a: np.ndarray, calls: int) -> float:
    g.barrier()
    start = time.perf_counter()
    for _ in range(calls):
        g.all_reduce(a)
    return slowest(time.perf_counter() - start)


def rust_loop(a: np.ndarray, calls: int) -> float:
    g.barrier()
    return slowest(_rust_all_reduce_loop(g, a, calls))


rows = []
for size, calls in SIZES:
    if args.quick:
        calls = 3
    a = np.zeros(size // 4, dtype=np.float32)  # zeros stay zeros
    python_loop(a, max(1, calls // 10))  # warm-up
    rust_loop(a, max(1, calls // 10))
    py, rs = [], []
    for _ in range(1 if args.quick else args.rounds):
        rs.append(rust_loop(a, calls) / calls)
        py.append(python_loop(a, calls) / calls)
    rows.append((size, calls, statistics.median(rs), statistics.median(py)))

if g.rank == 0:
    print(f"world {g.world_size}, {1 if args.quick else args.rounds} rounds, median time per call (slowest rank)")
    print(f"{'size':>8} {'calls':>6} {'Rust us':>10} {'Python us':>10} {'gap us':>8} {'ratio':>7}")
    for size, calls, rs, py in rows:
        label = f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"
        print(f"{label:>8} {calls:>6} {rs * 1e6:>10.1f} {py * 1e6:>10.1f} {(py - rs) * 1e6:>8.1f} {py / rs:>7.3f}")
g.barrier()
print(f"RESULT ok rank {g.rank} of {g.world_size}", flush=True)
g.shutdown()
