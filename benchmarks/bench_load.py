"""What verified loading costs: hash-then-open-by-path against hand-ORT-the-hashed-bytes.

    python benchmarks/bench_load.py                 # ~48 MB fp32 package with external data, 5 runs
    python benchmarks/bench_load.py --runs 3 --d-model 256

Before issue 35, `unmask.load` hashed every file and then let ONNX Runtime open them by
path (a window in which a file could be swapped). Now each file is read once, hashed, and
those bytes are handed to ORT (the graph as bytes, external data from memory). Each mode
runs in a fresh process, so the peak RSS (ru_maxrss) is the mode's own; the table shows the
median wall time of "hash + create session", the peak RSS, and the RSS once the session is
built and the hashed bytes are dropped (Linux only: /proc/self/statm).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

MODES = {
    "by path (before)": """
from unmask.limits import hash_bounded
for name in manifest.graph.files:
    hash_bounded(folder / name, None, "file")
session = placement.create_session(folder / manifest.graph.file)
""",
    "hashed bytes (now)": """
from unmask.package import read_package
package, graph = read_package(folder)
session = placement.create_session(graph.model, external_data=graph.external)
del graph
""",
}

PROLOGUE = """
import json, resource, sys, time
from pathlib import Path
from unmask.devices import select
from unmask.manifest import read_manifest
folder = Path(sys.argv[1])
manifest = read_manifest(folder)
placement = select(manifest, "cpu", threads=1)
start = time.perf_counter()
"""

EPILOGUE = """
seconds = time.perf_counter() - start
import gc, os
gc.collect()
rss = int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")  # Linux: what stays resident
print(json.dumps({"seconds": seconds, "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                  "rss": rss}))
"""


def build(folder: Path, d_model: int) -> Path:
    from unmask.export import export_model
    from unmask.export.testing import make_llada_checkpoint

    src = make_llada_checkpoint(folder / "hf", d_model=d_model, n_layers=6, n_heads=8, mlp_hidden_size=4 * d_model,
                                vocab_size=4096, tokenizer_vocab=320)
    export_model(src, folder / "pkg", quiet=True, validate=False, external_data_threshold=0)
    return folder / "pkg"


def measure(code: str, package: Path) -> dict:
    done = subprocess.run([sys.executable, "-c", PROLOGUE + code + EPILOGUE, str(package)], capture_output=True,
                          text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--d-model", type=int, default=384)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        package = build(Path(tmp), args.d_model)
        size = sum(p.stat().st_size for p in package.iterdir())
        results = {mode: [] for mode in MODES}
        for _ in range(args.runs):  # modes take turns, so machine noise hits both alike
            for mode, code in MODES.items():
                results[mode].append(measure(code, package))
        print(f"package {size / 2**20:.1f} MiB ({', '.join(sorted(p.name for p in package.iterdir()))}), "
              f"{args.runs} runs, 1 thread")
        print("| mode | hash + session (median s) | peak RSS (MiB) | RSS after load (MiB) |")
        print("|---|---|---|---|")
        for mode, rows in results.items():
            seconds = statistics.median(r["seconds"] for r in rows)
            peak = statistics.median(r["peak_rss"] for r in rows) / 2**20
            rss = statistics.median(r["rss"] for r in rows) / 2**20
            print(f"| {mode} | {seconds:.3f} | {peak:.0f} | {rss:.0f} |")


if __name__ == "__main__":
    main()
