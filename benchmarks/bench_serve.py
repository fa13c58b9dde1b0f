"""The server against the Python API, the same generations side by side in one run.

    python benchmarks/bench_serve.py                 # embedded model, 7 rounds
    python benchmarks/bench_serve.py --runs 15 --threads 2 --subprocess
    python benchmarks/bench_serve.py --model PACKAGE       # a bigger model: longer generations

For each workload the Python API (`model.generate` for the total, `model.stream` for the
time to its first text, which the API gives per finished block) and a real `unmask serve`
on a loopback port (httpx with keep-alive; non-streaming for the total, streaming for the
time to the first content delta) take turns, one generation each, --runs rounds; every
cell is the median. Overhead = server total / API total - 1 for the non-streaming
request, and the same difference in milliseconds (the server's cost per request is about
fixed, so its share falls as generations grow). Each row's generation is the same on both sides (same settings, greedy): the
region is all answer (max_tokens = gen_length), so both run the same forward passes; the
"one block" row lets the server stop once the answer's end is committed, so its passes
may be fewer. The targets: overhead under 5%, the first delta before the first block ends.

By default the server runs on a thread of this process and serves the same loaded model:
two processes would each keep an ONNX Runtime thread pool that spins on the same cores, and
the idle side's spinning would be charged to the other. `--subprocess` runs `unmask serve`
as its own process, as a user would.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import threading
import time

import httpx

import unmask

MESSAGE = [{"role": "user", "content": "Send a message to Anna saying I will be late."}]
WORKLOADS = {  # name -> settings (the server gets them as body fields)
    "24 tokens, blocks of 4": {"max_tokens": 24, "block_length": 4},
    "24 tokens, blocks of 8, threshold 0.9": {"max_tokens": 24, "block_length": 8, "threshold": 0.9},
    "one block of 32": {"max_tokens": 32},
}


def api_settings(settings: dict) -> dict:
    out = dict(settings)
    out["gen_length"] = out.pop("max_tokens")
    return out


def api_round(model, settings: dict) -> dict:
    t0 = time.perf_counter()
    result = model.generate(messages=MESSAGE, **api_settings(settings))
    total = time.perf_counter() - t0
    t0, first = time.perf_counter(), None
    for event in model.stream(messages=MESSAGE, **api_settings(settings)):
        if event.text and first is None:
            first = time.perf_counter() - t0
    return {"total": total, "first": first, "nfe": result.stats.nfe, "text": result.text,
            "first_block": result.stats.first_block_seconds}


def server_round(client: httpx.Client, settings: dict) -> dict:
    body = {"messages": MESSAGE, **settings}
    t0 = time.perf_counter()
    reply = client.post("/v1/chat/completions", json=body).json()
    total = time.perf_counter() - t0
    t0, first = time.perf_counter(), None
    with client.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as response:
        for line in response.iter_lines():
            if first is None and '"content": "' in line and '"content": ""' not in line:
                first = time.perf_counter() - t0
    streamed = time.perf_counter() - t0
    return {"total": total, "first": first, "streamed": streamed, "nfe": reply["unmask"]["forward_passes"],
            "text": reply["choices"][0]["message"]["content"]}


def steps_to_first_delta(client: httpx.Client, settings: dict) -> tuple[int | None, int]:
    """(step of the first content delta, last step of the first block), read off one streamed
    request with the canvas extension (not timed: canvas events cost time)."""
    body = {"messages": MESSAGE, **settings, "stream": True, "stream_canvas": True}
    step, first, block_end = None, None, 0
    with client.stream("POST", "/v1/chat/completions", json=body) as response:
        for line in response.iter_lines():
            if not line.startswith("data: {"):
                continue
            data = json.loads(line[6:])
            if "tokens" in data:  # a canvas event
                step = data["step"]
                block_end = step if data["block"] == 0 else block_end
            elif first is None and data["choices"][0].get("delta", {}).get("content"):
                first = step
    return first, block_end


def median(rows: list[dict], key: str) -> float:
    values = [r[key] for r in rows if r[key] is not None]
    return statistics.median(values) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--subprocess", action="store_true", help="run `unmask serve` as its own process")
    parser.add_argument("--model", default=None, help="package path or store name (default: the embedded model)")
    args = parser.parse_args()
    model = unmask.load(args.model, threads=args.threads)
    label = args.model or "embedded model"
    if args.subprocess:
        port, process = start_server(model.threads, args.model)
        try:
            table(model, label, f"http://127.0.0.1:{port}", args.runs, "its own process")
        finally:
            process.terminate()
            process.wait(timeout=30)
        return
    from unmask.serve import ServeOptions
    from unmask.serve.app import make_server

    server = make_server(model, ServeOptions(port=0))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    try:
        table(model, label, f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}", args.runs,
              "a thread of this process")
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def start_server(threads: int, name: str | None) -> tuple[int, subprocess.Popen]:
    """`unmask serve` in its own process, as a user runs it (its own interpreter, its own GIL)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "unmask", "serve", *([name] if name else []), "--port",
                               str(port), "--threads", str(threads)], stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                return port, server
        except httpx.TransportError:
            if server.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("unmask serve did not start")
            time.sleep(0.1)


def table(model, label: str, base: str, runs: int, where: str) -> None:
    print(f"{label}, {model.threads} threads, server on {where}, {runs} rounds, medians in ms\n")
    print("| workload | API total | server total | overhead | overhead ms | API first text | API first block | "
          "server first delta | server streamed total | NFE API / server | first delta step / first block's last | "
          "same text |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    with httpx.Client(base_url=base, timeout=120) as client:
        for name, settings in WORKLOADS.items():
            api_round(model, settings), server_round(client, settings)  # warm both paths
            api, srv = [], []
            for _ in range(runs):
                api.append(api_round(model, settings))
                srv.append(server_round(client, settings))
            a, s = median(api, "total"), median(srv, "total")
            same = all(x["text"] == y["text"] for x, y in zip(api, srv))
            first_step, block_end = steps_to_first_delta(client, settings)
            print(f"| {name} | {a * 1e3:.1f} | {s * 1e3:.1f} | {(s / a - 1) * 100:+.1f}% | {(s - a) * 1e3:+.1f} | "
                  f"{median(api, 'first') * 1e3:.1f} | {median(api, 'first_block') * 1e3:.1f} | "
                  f"{median(srv, 'first') * 1e3:.1f} | {median(srv, 'streamed') * 1e3:.1f} | "
                  f"{api[0]['nfe']} / {srv[0]['nfe']} | {first_step} / {block_end} | {'yes' if same else 'NO'} |")


if __name__ == "__main__":
    main()
