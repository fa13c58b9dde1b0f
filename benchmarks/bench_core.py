"""Scoring throughput of the C++ core vs a vectorised numpy version of the same scoring.

    python benchmarks/bench_core.py [--rows 32] [--repeats 15] [--dtypes float32,float16] [--simd avx2]

For 32 rows of logits at LLaDA's (126,464) and Dream's (152,064) vocabulary, T = 0:
rows/s and GB/s of logits read (median of --repeats runs), C++ on 1 and 2 threads and numpy,
next to the machine's read bandwidth measured with a large numpy sum (best of a few runs).
Targets: >= 5x numpy and >= 50% of the measured bandwidth.

The numpy baseline is the straightforward vectorised version, without wasted passes:
float16 converted once to a float32 buffer (numpy's half loops are scalar), argmax
(first on ties), the max read back at the argmax, x = logits - max into a reused
float32 buffer (float16 converted on the way), exp in place (numpy's SIMD exp), a float32
pairwise sum for z; entropy adds one fused multiply-sum (einsum) over e * x.
--simd caps the C++ kernel (avx512 / avx2 / portable) through UNMASK_SIMD, to compare them.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

from unmask import _core

VOCABS = (126_464, 152_064)
ALGORITHMS = (("max prob", _core.Algorithm.LOW_CONFIDENCE), ("neg. entropy", _core.Algorithm.ENTROPY))


def median_seconds(fn, repeats: int) -> tuple[float, float]:
    """Median wall and median process-CPU seconds. CPU time is the steadier figure on a
    shared machine (it leaves out time spent descheduled); for 2 threads it sums both."""
    fn()  # warm-up: first-touch of buffers, kernel selection
    wall, cpu = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return statistics.median(wall), statistics.median(cpu)


def read_bandwidth(repeats: int) -> float:
    """GB/s of a single-threaded numpy sum over 256 MB, best run (the machine's capability)."""
    big = np.ones(64 * 1024 * 1024, dtype=np.float32)
    best = float("inf")
    for _ in range(max(3, repeats // 4)):
        t0 = time.perf_counter()
        big.sum()
        best = min(best, time.perf_counter() - t0)
    return big.nbytes / best / 1e9


class NumpyScorer:
    """T = 0 scoring in numpy: tokens and max prob (1 / z) or negative entropy."""

    def __init__(self, shape: tuple[int, int]):
        self.f32 = np.empty(shape, dtype=np.float32)
        self.x = np.empty(shape, dtype=np.float32)
        self.e = np.empty(shape, dtype=np.float32)

    def __call__(self, logits: np.ndarray, entropy: bool):
        if logits.dtype != np.float32:  # numpy's float16 loops are scalar: convert once (SIMD cast)
            logits = np.copyto(self.f32, logits) or self.f32
        token = logits.argmax(axis=1)
        m = np.take_along_axis(logits, token[:, None], axis=1).astype(np.float32)
        x = np.subtract(logits, m, out=self.x, dtype=np.float32)
        if not entropy:
            z = np.exp(x, out=x).sum(axis=1)
            return token, 1.0 / z.astype(np.float64)
        e = np.exp(x, out=self.e)
        z = e.sum(axis=1).astype(np.float64)
        return token, np.einsum("ij,ij->i", e, x) / z - np.log(z)


def params(algorithm) -> "_core.DecodeParams":
    p = _core.DecodeParams()
    p.algorithm = algorithm
    p.mask_id = 1 << 40  # outside the vocabulary: nothing banned, same work as numpy
    return p


def bench_case(logits: np.ndarray, algorithm, repeats: int) -> list[tuple[str, tuple[float, float]]]:
    """(implementation, (median wall, median CPU seconds)) for numpy and C++ on 1 and 2 threads; checks they agree."""
    entropy = algorithm == _core.Algorithm.ENTROPY
    numpy_score = NumpyScorer(logits.shape)
    tok_np, conf_np = numpy_score(logits, entropy)
    rows = [("numpy", median_seconds(lambda: numpy_score(logits, entropy), repeats))]
    p = params(algorithm)
    for threads in (1, 2):
        tok, conf = _core.score(p, logits, 0, threads)
        assert np.array_equal(tok, tok_np), "C++ and numpy tokens differ"
        # rtol 1e-4: numpy's float32 einsum is the looser one (~1e-5 on entropy; C++ ~1e-8 vs float64)
        assert np.allclose(conf, conf_np, rtol=1e-4, atol=1e-6), "C++ and numpy confidences differ"
        rows.append((f"C++ {threads} thr", median_seconds(lambda: _core.score(p, logits, 0, threads), repeats)))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--dtypes", default="float32,float16")
    ap.add_argument("--simd", choices=("avx512", "avx2", "portable"), help="cap the C++ kernel (UNMASK_SIMD)")
    args = ap.parse_args()
    if args.simd:
        os.environ["UNMASK_SIMD"] = args.simd  # read by the core on its first scoring call

    bandwidth = read_bandwidth(args.repeats)
    print(f"measured read bandwidth (numpy sum, 256 MB, 1 thread, best run): {bandwidth:.1f} GB/s")
    print(f"C++ kernel cap: {os.environ.get('UNMASK_SIMD', 'none (widest the CPU has)')}; "
          f"times: median of {args.repeats}\n")
    print("rows/s, GB/s, x numpy, % bw: wall clock; cpu GB/s: bytes per CPU-second (all threads)")
    header = (f"{'vocab':>8} {'dtype':>8} {'scoring':>13} {'impl':>10} {'rows/s':>8} {'GB/s':>6} "
              f"{'x numpy':>8} {'% bw':>5} {'cpu GB/s':>9} {'x numpy':>8}")
    print(header)
    print("-" * len(header))
    rng = np.random.default_rng(0)
    for vocab in VOCABS:
        base = (rng.standard_normal((args.rows, vocab)) * 3).astype(np.float32)
        for dtype in args.dtypes.split(","):
            logits = base.astype(dtype)
            for name, algorithm in ALGORITHMS:
                rows = bench_case(logits, algorithm, args.repeats)
                t_np, cpu_np = rows[0][1]
                for impl, (seconds, cpu) in rows:
                    gbs = logits.nbytes / seconds / 1e9
                    print(f"{vocab:>8} {dtype:>8} {name:>13} {impl:>10} {args.rows / seconds:>8.0f} {gbs:>6.2f} "
                          f"{t_np / seconds:>8.1f} {100 * gbs / bandwidth:>4.0f}% "
                          f"{logits.nbytes / cpu / 1e9:>9.2f} {cpu_np / cpu:>8.1f}")


if __name__ == "__main__":
    main()
