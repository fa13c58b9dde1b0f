"""A real `unmask serve` on a loopback port, for the serve tests: start, wait, read the port, stop."""

from __future__ import annotations

import json
import shutil
import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator

import httpx

import unmask
from unmask.manifest import read_manifest, write_manifest
from unmask.model import default_package_dir
from unmask.serve import ServeOptions
from unmask.serve.app import make_server
from unmask.serve.metrics import parse


def one_token_per_step_model(folder):
    """The embedded model with one token committed per step as its package default (its shipped
    default is threshold decoding, a few steps an answer): the queue and cancellation tests need
    generations of many steps. A copy of the package in `folder` with that manifest."""
    copy = shutil.copytree(default_package_dir(), folder / "default")  # served under the same name
    manifest = read_manifest(copy)
    manifest.generation = {k: v for k, v in manifest.generation.items() if k not in ("threshold", "cache")}
    write_manifest(manifest, copy)
    return unmask.load(copy)


@contextmanager
def running(model: Any, **options: Any) -> Iterator[str]:
    """The base URL of a server for `model` on 127.0.0.1 (a free port), stopped on exit."""
    server = make_server(model, ServeOptions(port=0, **options))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the test server did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def sse_events(response: httpx.Response) -> list[tuple[str | None, Any]]:
    """(event name, decoded data) of every server-sent event; data "[DONE]" stays a string."""
    events, name = [], None
    for line in response.iter_lines():
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            data = line[6:]
            events.append((name, data if data == "[DONE]" else json.loads(data)))
            name = None
    return events


def metrics(client: httpx.Client) -> dict[str, float]:
    return parse(client.get("/metrics").text)


def wait_for(predicate, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.02)
