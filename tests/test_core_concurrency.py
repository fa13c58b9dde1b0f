"""One Decoder used from several threads at once (issue 35, item 2).

advance() scores without the GIL, so before the fix a second thread advancing the same decoder
freed the buffers the first was reading (ASan: heap-use-after-free in the scorer) and crashed
the process. Now a decoder serves one call at a time and refuses the others with
unmask.StateError. The threads run in a child process so a regression fails the test instead
of killing pytest; under the sanitizer build (.ci/sanitize) the child is instrumented too.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from unmask import StateError, _core

CHILD = r"""
import json, sys, threading
import numpy as np
from unmask import InputError, StateError, _core

V, MASK, PROMPT, GEN = 20000, 19999, 4, 48
p = _core.DecodeParams()
p.mask_id, p.gen_length, p.block_length, p.steps, p.threads = MASK, GEN, GEN, GEN, 2
decoder = _core.Decoder(p, np.arange(1, PROMPT + 1, dtype=np.int64), None, False)
logits = np.random.default_rng(0).standard_normal((1, PROMPT + GEN, V)).astype(np.float32)
counts = {"advanced": 0, "refused": 0, "read": 0, "other": []}
lock = threading.Lock()
start = threading.Barrier(5)

def note(key, exc=None):
    with lock:
        if exc is None:
            counts[key] += 1
        else:
            counts["other"].append(repr(exc))

def advancer():
    start.wait()
    # Until the decoder is done: a refused call returns at once, so a fixed count of tries could
    # run out while another thread holds a slow (sanitized, loaded machine) step.
    for _ in range(10_000_000):
        try:
            if decoder.done:
                return
            decoder.advance_window(logits)
            note("advanced")
        except StateError:
            note("refused")
        except Exception as exc:  # anything else is a failure
            note("other", exc)
            return

def reader():
    start.wait()
    for _ in range(2000):
        try:
            ids, done = decoder.ids, decoder.done
            if not done:
                decoder.next_request(); decoder.input_ids()
            note("read")
            if done:
                return
        except StateError:
            note("refused")
        except Exception as exc:
            note("other", exc)
            return

threads = [threading.Thread(target=advancer) for _ in range(4)] + [threading.Thread(target=reader)]
for t in threads: t.start()
for t in threads: t.join()
ids = decoder.ids
counts["done"] = decoder.done
counts["masks_left"] = int((ids == MASK).sum())
counts["in_vocab"] = bool(((ids >= 0) & (ids < V)).all())
json.dump(counts, sys.stdout)
"""


class TestOneDecoderManyThreads:
    def test_concurrent_calls_are_refused_not_crashed(self):
        child = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=300)
        assert child.returncode == 0, child.stderr[-3000:]
        counts = json.loads(child.stdout)
        assert counts["other"] == []
        assert counts["refused"] >= 1  # the threads did collide, and the collision was a StateError
        assert counts["done"] and counts["masks_left"] == 0 and counts["in_vocab"]
        assert counts["advanced"] == 48  # one token per step: each of the 48 steps advanced exactly once

    def test_state_error_is_typed(self):
        assert issubclass(StateError, RuntimeError)
        p = _core.DecodeParams()
        p.mask_id, p.gen_length, p.block_length, p.steps = 9, 2, 2, 2
        decoder = _core.Decoder(p, np.array([1], np.int64), None, False)
        logits = np.zeros((1, 3, 10), np.float32)
        decoder.advance_window(logits)
        decoder.advance_window(logits)
        with pytest.raises(StateError, match="done"):  # out of order: the same type as a collision
            decoder.advance_window(logits)

