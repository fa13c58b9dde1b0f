"""validate() refuses whatever the C++ core would refuse, and every size has a stated bound
(issue 35, item 5). The property-based version over all fields is tests/test_core_fuzz.py.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from unmask import ConfigError, GenerationConfig, ModelFacts, _core
from unmask.config import MAX_LENGTH, check_threads
from unmask.decoding import make_decoder

FACTS = ModelFacts(mask_id=31, eos_id=2)


class TestValidateMatchesTheCore:
    @pytest.mark.parametrize("fields,name", [
        ({"gen_length": 2**63, "block_length": 2**63}, "gen_length"),
        ({"gen_length": MAX_LENGTH * 2, "block_length": 64}, "gen_length"),
        ({"steps": 2**62}, "steps"),
        ({"top_k": 2**63}, "top_k"),
        ({"seed": 2**64}, "seed"),
        ({"cfg_scale": float("inf")}, "cfg_scale"),
        ({"alg_temp": float("inf")}, "alg_temp"),
        ({"factor": float("inf")}, "factor"),
        ({"temperature": float("inf")}, "temperature"),
        ({"temperature": 1e-300}, "temperature"),
        ({"temperature": 10**400}, "temperature"),  # an int beyond float range: ConfigError, not OverflowError
        ({"early_stop": 1}, "early_stop"),
        ({"logits_eos_inf": "yes"}, "logits_eos_inf"),
    ])
    def test_refused_by_validate(self, fields, name):
        with pytest.raises(ConfigError, match=name):
            GenerationConfig(**{"gen_length": 8, **fields}).validate(FACTS)

    @pytest.mark.parametrize("name,value", [("mask_id", 2**63), ("eos_id", 2**64), ("eot_id", 2**63)])
    def test_ids_beyond_int64_are_refused(self, name, value):
        with pytest.raises(ConfigError, match=name):
            ModelFacts(**{"mask_id": 31, name: value})

    def test_the_edges_build_a_decoder(self):
        cfg = GenerationConfig(gen_length=MAX_LENGTH, steps=MAX_LENGTH, temperature=_core.MIN_TEMPERATURE,
                               seed=2**64 - 1, top_k=2**63 - 1).validate(FACTS)
        decoder = make_decoder(cfg, ModelFacts(mask_id=2**63 - 1), [1])
        assert decoder.length == MAX_LENGTH + 1


class TestSizesAreBounded:
    def test_huge_gen_length_fails_fast_with_the_bound(self):
        # The audit's hang: building the "use a divisor" hint looped over every integer up to gen_length.
        with pytest.raises(ConfigError, match=f"gen_length must be <= {MAX_LENGTH}"):
            GenerationConfig(gen_length=99999999999999999999999999, block_length=32).validate()

    def test_divisor_hint_within_the_bound(self):
        with pytest.raises(ConfigError, match=r"e\.g\. 30\)"):
            GenerationConfig(gen_length=120000, block_length=31).validate()

    def test_threads_bound(self):
        with pytest.raises(ConfigError, match=f"at most {_core.max_threads()}"):
            check_threads(20000)
        assert check_threads(_core.max_threads()) == _core.max_threads()

    def test_cli_refuses_in_one_line(self):
        for flags in (["--gen-length", "99999999999999999999999999", "--block-length", "32"], ["--threads", "20000"]):
            child = subprocess.run([sys.executable, "-m", "unmask", "generate", "-p", "hi", *flags],
                                   capture_output=True, text=True, timeout=120)
            assert child.returncode != 0
            lines = child.stderr.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("error:") and ("<= 131072" in lines[0] or "at most" in
                                                                           lines[0]), child.stderr

    def test_decode_refuses_a_million_tokens(self):
        # gen_length 1e6 ran at 1.6 s a step with no cap; the bound is the core's MAX_LENGTH.
        with pytest.raises(ConfigError, match=str(MAX_LENGTH)):
            import unmask

            unmask.decode(lambda ids: np.zeros((1, ids.shape[1], 32), np.float32), [1],
                          GenerationConfig(gen_length=1_000_000), facts=FACTS)
