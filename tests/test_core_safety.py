"""The core is safe to misuse (issue 35, item 2): every DecodeParams field is checked at the
C++ boundary, and a machine that refuses new threads only makes scoring slower.

These drive `unmask._core` directly, without GenerationConfig.validate(): the checks must hold
for any caller of the extension. Crashing cases run in a subprocess so a regression fails the
test instead of killing pytest (and, under the sanitizer build, the child is checked too).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from unmask import ConfigError, _core

MASK, V = 31, 32


def params(**fields):
    p = _core.DecodeParams()
    p.mask_id = MASK
    p.gen_length = p.steps = p.block_length = 8
    for name, value in fields.items():
        setattr(p, name, value)
    return p


def run_child(code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout)


BAD_FIELDS = [
    ({"eos_id": -1}, "eos_id"),
    ({"eot_id": -5}, "eot_id"),
    ({"mask_id": -1}, "mask_id"),
    ({"gen_length": 2**62, "block_length": 2**62, "steps": 2**62}, "gen_length"),
    ({"gen_length": 2**63 - 1, "block_length": 1, "steps": 1}, "gen_length"),
    ({"steps": 2**62}, "steps"),
    ({"block_length": 3}, "block_length"),
    ({"block_length": 16}, "block_length"),
    ({"threads": 20000}, "threads"),
    ({"threads": -1}, "threads"),
    ({"threshold": float("nan")}, "threshold"),
    ({"threshold": 1.5}, "threshold"),
    ({"factor": float("inf")}, "factor"),
    ({"factor": 0.0}, "factor"),
    ({"temperature": float("inf")}, "temperature"),
    ({"temperature": float("nan")}, "temperature"),
    ({"temperature": 1e-300}, "temperature"),
    ({"alg_temp": float("inf")}, "alg_temp"),
    ({"cfg_scale": float("inf")}, "cfg_scale"),
    ({"cfg_scale": float("nan")}, "cfg_scale"),
    ({"eps": 0.0}, "eps"),
    ({"top_k": 0}, "top_k"),
    ({"top_p": float("nan")}, "top_p"),
    ({"threshold": 0.9, "factor": 1.0}, "only one"),
    ({"logits_eos_inf": True}, "eos_id"),
    ({"confidence_eos_eot_inf": True}, "eos_id or eot_id"),
]


class TestParamsAtTheBoundary:
    @pytest.mark.parametrize("fields,name", BAD_FIELDS)
    def test_decoder_refuses(self, fields, name):
        with pytest.raises(ConfigError, match=name):
            _core.Decoder(params(**fields), np.array([1, 2], np.int64), None, False)

    @pytest.mark.parametrize("fields,name", BAD_FIELDS)
    def test_score_refuses(self, fields, name):
        # score() builds no Decoder: before the fix a negative eos/eot id read row[-1].
        shape = (2, 2, V) if fields.get("cfg_scale", 0) > 0 else (2, V)  # the binding reads 3 dims only then
        logits = np.zeros(shape, np.float32)
        with pytest.raises(ConfigError, match=name):
            _core.score(params(**fields), logits)

    def test_bounds_are_in_the_message(self):
        with pytest.raises(ConfigError, match=r"\[1, 131072\]"):
            _core.Decoder(params(gen_length=2**20, block_length=2**20, steps=2**20), np.array([1], np.int64),
                          None, False)

    def test_edges_are_accepted(self):
        p = params(gen_length=2**17, block_length=2**17, steps=2**17, temperature=1e-6, threads=256,
                   eos_id=0, eot_id=0, confidence_eos_eot_inf=True)
        decoder = _core.Decoder(p, np.array([1], np.int64), None, False)
        assert decoder.length == 2**17 + 1 and not decoder.done


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
