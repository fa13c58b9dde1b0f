"""Every scoring kernel (widest the CPU has, AVX2, portable) picks the same tokens and
confidences. The kernel is chosen once per process from UNMASK_SIMD, so each capped kernel
runs in a subprocess; the portable one is what arm64 and MSVC builds get."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from unmask import _core

ALGORITHMS = ("LOW_CONFIDENCE", "MASKGIT_PLUS", "TOPK_MARGIN", "ENTROPY")
DTYPES = ("float32", "float16")

# Rows with ties across lanes, a ragged tail, a banned id holding the max, and wide ranges.
SCRIPT = r"""
import json, sys
import numpy as np
from unmask import _core

rng = np.random.default_rng(7)
rows = rng.normal(0.0, 4.0, size=(12, 5003)).astype(np.float32)
rows[0, [17, 900, 5002]] = 30.0           # ties: the lowest index must win
rows[1, 41] = 50.0                        # the mask id holds the max: it is never chosen
rows[2] = np.linspace(-80.0, 20.0, 5003)  # wide range: exp underflow
out = {}
for algorithm in %(algorithms)r:
    for dtype in %(dtypes)r:
        params = _core.DecodeParams()
        params.algorithm = getattr(_core.Algorithm, algorithm)
        params.mask_id = 41
        tokens, confidence = _core.score(params, rows.astype(dtype), step=0, threads=1)
        out[algorithm + "/" + dtype] = [np.asarray(tokens).tolist(), np.asarray(confidence, float).tolist()]
out["isa"] = _core.row_pass_isa()
json.dump(out, sys.stdout)
""" % {"algorithms": ALGORITHMS, "dtypes": DTYPES}


def scores_with(simd: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "UNMASK_SIMD"}
    if simd is not None:
        env["UNMASK_SIMD"] = simd
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def widest():
    return scores_with(None)


class TestKernelsAgree:
    def test_the_default_kernel_is_the_widest_the_cpu_has(self, widest):
        assert widest["isa"] == _core.row_pass_isa()
        assert widest["isa"] in ("avx512", "avx2", "portable")

    def test_the_default_kernel_breaks_ties_and_bans_the_mask(self, widest):
        tokens, _ = widest["LOW_CONFIDENCE/float32"]
        assert tokens[0] == 17 and tokens[1] != 41

    @pytest.mark.parametrize("simd", ["avx2", "portable"])
    def test_capped_kernel_matches_the_widest(self, widest, simd):
        capped = scores_with(simd)
        if simd == "avx2" and widest["isa"] == "portable":
            pytest.skip("this CPU has no AVX2: only the portable kernel exists here")
        assert capped.pop("isa") == simd  # the cap really switched kernels
        widest = {k: v for k, v in widest.items() if k != "isa"}
        assert capped.keys() == widest.keys()
        for key, (tokens, confidence) in widest.items():
            assert capped[key][0] == tokens, key
            np.testing.assert_allclose(capped[key][1], confidence, rtol=1e-5, atol=1e-6, err_msg=key)

    def test_in_process_matches_subprocess(self, widest):
        params = _core.DecodeParams()
        params.algorithm = _core.Algorithm.ENTROPY
        params.mask_id = 41
        rng = np.random.default_rng(7)
        rows = rng.normal(0.0, 4.0, size=(12, 5003)).astype(np.float32)
        rows[0, [17, 900, 5002]] = 30.0
        rows[1, 41] = 50.0
        rows[2] = np.linspace(-80.0, 20.0, 5003)
        tokens, _ = _core.score(params, rows, step=0, threads=1)
        assert np.asarray(tokens).tolist() == widest["ENTROPY/float32"][0]
