"""Scoring throughput of the C++ core vs a vectorised numpy version of the same scoring.

    python benchmarks/bench_core.py [--rows 32] [--repeats 20]

For 32 rows of float32 logits at LLaDA's (126,464) and Dream's (152,064) vocabulary:
rows/s and GB/s of logits read, C++ on 1 and 2 threads and numpy, next to the machine's
memory read bandwidth measured with a large numpy sum. Targets: >= 5x numpy and >= 50%
of the measured bandwidth.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from unmask import _core


def best_seconds(fn, repeats: int) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def read_bandwidth(repeats: int) -> float:
    """GB/s of a single-threaded numpy sum over 256 MB (larger than any cache)."""
    big = np.ones(64 * 1024 * 1024, dtype=np.float32)
    return big.nbytes / best_seconds(lambda: big.sum(), max(3, repeats // 4)) / 1e9


def numpy_score(logits: np.ndarray, algorithm: str):
    """The same scoring, vectorised numpy: argmax (first on ties), and max prob or negative entropy."""
    m = logits.max(axis=1, keepdims=True)
    token = logits.argmax(axis=1)
    x = logits - m
    e = np.exp(x)
    z = e.sum(axis=1)
    if algorithm == "entropy":
        return token, (e * x).sum(axis=1) / z - np.log(z)
    return token, 1.0 / z


def params(algorithm) -> "_core.DecodeParams":
    p = _core.DecodeParams()
    p.algorithm = algorithm
    p.mask_id = 1 << 40  # outside the vocabulary: nothing banned, same work as numpy
    return p


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args()

    bandwidth = read_bandwidth(args.repeats)
    print(f"measured memory read bandwidth (numpy sum, 256 MB, 1 thread): {bandwidth:.1f} GB/s\n")
    header = f"{'vocab':>8} {'scoring':>15} {'impl':>12} {'rows/s':>10} {'GB/s':>7} {'x numpy':>8} {'% bw':>6}"
    print(header)
    print("-" * len(header))
    rng = np.random.default_rng(0)
    for vocab in (126_464, 152_064):
        logits = (rng.standard_normal((args.rows, vocab)) * 3).astype(np.float32)
        for name, algorithm in (("max prob", _core.Algorithm.LOW_CONFIDENCE), ("neg. entropy", _core.Algorithm.ENTROPY)):
            np_name = "entropy" if algorithm == _core.Algorithm.ENTROPY else "maxprob"
            t_np = best_seconds(lambda: numpy_score(logits, np_name), args.repeats)
            tok_np, conf_np = numpy_score(logits, np_name)
            rows = [("numpy", t_np)]
            for threads in (1, 2):
                p = params(algorithm)
                tok, conf = _core.score(p, logits, 0, threads)
                assert np.array_equal(tok, tok_np) and np.allclose(conf, conf_np, rtol=1e-4, atol=1e-6)
                rows.append((f"C++ {threads} thr", best_seconds(lambda: _core.score(p, logits, 0, threads), args.repeats)))
            for impl, seconds in rows:
                gbs = logits.nbytes / seconds / 1e9
                print(f"{vocab:>8} {name:>15} {impl:>12} {args.rows / seconds:>10.0f} {gbs:>7.2f} "
                      f"{t_np / seconds:>8.1f} {100 * gbs / bandwidth:>5.0f}%")


if __name__ == "__main__":
    main()
