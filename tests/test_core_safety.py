"""The core is safe to misuse (issue 35, item 2): a machine that refuses new threads only
makes scoring slower.

Crashing cases run in a subprocess so a regression fails the test instead of killing pytest
(and, under the sanitizer build, the child is checked too).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from unmask import _core

MASK, V = 31, 32


def run_child(code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout)


class TestThreadsThatCannotStart:
    # The address-space limit leaves room for `room` thread stacks: with 0 the first thread
    # fails, with 2 the third does (main: std::terminate, as started threads were never joined).
    @pytest.mark.parametrize("room", [0, 2])
    def test_scoring_falls_back_to_fewer_threads(self, room):
        child = run_child(f"""
            import resource
            import numpy as np
            from unmask import _core
            p = _core.DecodeParams(); p.mask_id = {MASK}
            logits = np.random.default_rng(0).standard_normal((64, {V})).astype(np.float32)
            want_tokens, want_conf = _core.score(p, logits, threads=1)
            size = next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmSize"))
            stack = resource.getrlimit(resource.RLIMIT_STACK)[0]
            stack = stack if 0 < stack < 2**30 else 8 << 20
            hard = resource.getrlimit(resource.RLIMIT_AS)[1]
            resource.setrlimit(resource.RLIMIT_AS, (size + {room} * (stack + (1 << 20)) + (4 << 20), hard))
            tokens, conf = _core.score(p, logits, threads=8)
            print("same" if (tokens == want_tokens).all() and (conf == want_conf).all() else "differs")
        """)
        assert child.returncode == 0, child.stderr[-2000:]
        assert child.stdout.strip() == "same"
