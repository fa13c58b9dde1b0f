"""One model, many requests: a FIFO of jobs run one at a time on a worker thread.

The queue is bounded (requests waiting behind the running one); submitting to a full
queue raises QueueFull, which the app answers with 503 and Retry-After. A job hands its
events to the asyncio loop that waits for it; cancelling a job (its client left) makes
the generation stop at its next step, or skips it if it has not started.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from typing import Any, Callable

log = logging.getLogger("unmask.serve")


class QueueFull(Exception):
    """Every queue slot is taken."""


class Job:
    """One request's generation as seen from both sides: the worker emits, the handler awaits."""

    def __init__(self, run: Callable[["Job"], None]):
        self.run = run
        self.loop = asyncio.get_running_loop()
        self.events: asyncio.Queue = asyncio.Queue()
        self._cancelled = threading.Event()
        self.arrived = time.perf_counter()

    def emit(self, kind: str, payload: Any) -> None:
        """Called on the worker thread; delivered on the loop thread in order."""
        try:
            self.loop.call_soon_threadsafe(self.events.put_nowait, (kind, payload))
        except RuntimeError:  # the loop is closed: the server is shutting down
            self.cancel()

    def cancel(self) -> None:
        self._cancelled.set()

    def cancelled(self) -> bool:
        return self._cancelled.is_set()


class Worker:
    """The generation thread and its bounded FIFO."""

    def __init__(self, limit: int):
        self.limit = limit
        self._queue: queue.Queue = queue.Queue()
        self._lock = threading.Lock()
        self._waiting = 0
        self._running = 0
        self._current: Job | None = None
        self._thread: threading.Thread | None = None

    @property
    def waiting(self) -> int:
        return self._waiting

    @property
    def running(self) -> int:
        return self._running

    def start(self) -> None:
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._loop, name="unmask-serve-worker", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Cancel the running generation (at its next step) and end the thread after it."""
        if self._thread is not None:
            current = self._current
            if current is not None:
                current.cancel()
            self._queue.put(None)
            self._thread.join(timeout=30)
            self._thread = None

    def submit(self, job: Job) -> None:
        self.start()  # normally started by the app's lifespan; an app mounted without one starts it here
        with self._lock:
            if self._waiting >= self.limit and (self._running or self._waiting):
                raise QueueFull
            self._waiting += 1
        self._queue.put(job)

    def _loop(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            with self._lock:
                self._waiting -= 1
                self._running, self._current = 1, job
            try:
                job.run(job)
            except Exception as exc:  # one generation's failure must not stop the server
                log.exception("generation failed")
                job.emit("error", exc)
            finally:
                with self._lock:
                    self._running, self._current = 0, None
