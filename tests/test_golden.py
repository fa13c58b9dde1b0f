"""Golden test: exact tokens of a fixed set of generations and the exported graphs' logits.

Pins today's behaviour so refactors of settings resolution, the decoder, the exporter or
the engine are provably behaviour-preserving. Each case (see golden_cases.py) runs through
the public API on tiny seeded LLaDA/Dream packages exported here (fp32 and int8) or on the
embedded default model, and must reproduce, token for token, the record in
tests/golden/golden.json: prompt ids, resolved settings, the whole generated region, the
answer text and the number of forward passes. The graph cases pin each tiny package's
declared inputs/outputs (the graph contract) and a fingerprint of its logits.

Regenerate only when behaviour is meant to change, and say why in the commit:

    python tests/test_golden.py --write              # refuses if the file exists
    python tests/test_golden.py --write --overwrite  # replaces it

(run against an installed tree: /work/wt/devinstall.sh NAME, then the venv's python).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
from golden_cases import PACKAGES, Models, build_packages, generation_cases, graph_contract, graph_fingerprint, run_case

GOLDEN = Path(__file__).parent / "golden" / "golden.json"
CASES = generation_cases()
# (rtol, atol) on logits of size ~1: fp32 allows other CPUs' summation orders; int8 differs from
# fp32 by ~5e-3, so a changed quantization scheme fails while a rescaling order does not
GRAPH_TOLERANCE = {"fp32": (1e-5, 1e-6), "int8": (1e-4, 1e-5)}


@pytest.fixture(scope="module")
def golden():
    return json.loads(GOLDEN.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return Models(build_packages(tmp_path_factory.mktemp("golden")))


def first_difference(got: list, want: list) -> str:
    for i, (g, w) in enumerate(zip(got, want)):
        if g != w:
            return f"first difference at position {i}: got {g}, pinned {w} (got {got}, pinned {want})"
    return f"lengths differ: got {len(got)}, pinned {len(want)}"


class TestGenerations:
    def test_records_match_cases(self, golden):
        assert sorted(golden["generations"]) == sorted(c.id for c in CASES)

    @pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
    def test_case(self, case, models, golden):
        want = golden["generations"][case.id]
        got = run_case(case, models)
        assert got["settings"] == want["settings"]
        assert got["prompt_ids"] == want["prompt_ids"], "prompt ids: " + first_difference(got["prompt_ids"],
                                                                                         want["prompt_ids"])
        changed = {k: (got["config"].get(k, "<missing>"), v) for k, v in want["config"].items()
                   if got["config"].get(k, "<missing>") != v}
        assert not changed, f"resolved settings changed (got, pinned): {changed}"
        assert got["token_ids"] == want["token_ids"], "tokens: " + first_difference(got["token_ids"],
                                                                                   want["token_ids"])
        assert got["nfe"] == want["nfe"], f"forward passes: got {got['nfe']}, pinned {want['nfe']}"
        assert got.get("text") == want.get("text")


class TestGraphs:
    @pytest.mark.parametrize("package", PACKAGES)
    def test_contract(self, package, models, golden):
        assert graph_contract(models.session(package)) == golden["graphs"][package]["contract"]

    @pytest.mark.parametrize("package", PACKAGES)
    def test_logits(self, package, models, golden):
        want = golden["graphs"][package]["fingerprint"]
        got = graph_fingerprint(models.session(package), models.model(package).manifest.special_ids.mask_id)
        rtol, atol = GRAPH_TOLERANCE[package.split("-")[1]]
        assert got["input_ids"] == want["input_ids"] and got["probe_vocab"] == want["probe_vocab"]
        assert got["output_shapes"] == want["output_shapes"]
        np.testing.assert_allclose(got["probes"], want["probes"], rtol=rtol, atol=atol, err_msg="logits at probes")
        np.testing.assert_allclose(got["sumsq"], want["sumsq"], rtol=rtol, err_msg="sum of squares per row")
        np.testing.assert_array_equal(got["argmax"], want["argmax"], err_msg="argmax per row")
        assert got["present_sumsq"].keys() == want["present_sumsq"].keys()
        for name, value in want["present_sumsq"].items():
            assert got["present_sumsq"][name] == pytest.approx(value, rel=rtol), name

    def test_export_is_deterministic(self, models, tmp_path):
        """Two exports of two freshly made checkpoints give the same logits, bit for bit."""
        again = Models(build_packages(tmp_path))
        for package in PACKAGES:
            mask = models.model(package).manifest.special_ids.mask_id
            a = graph_fingerprint(models.session(package), mask)
            b = graph_fingerprint(again.session(package), mask)
            assert a == b, package


# ---------------------------------------------------------------------- writing the golden file


def compute_golden() -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        models = Models(build_packages(Path(tmp)))
        generations = {c.id: run_case(c, models) for c in CASES}
        graphs = {}
        for package in PACKAGES:
            session = models.session(package)
            mask = models.model(package).manifest.special_ids.mask_id
            graphs[package] = {"contract": graph_contract(session), "fingerprint": graph_fingerprint(session, mask)}
    return {"written_at_commit": _commit(), "generations": generations, "graphs": graphs}


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).parent,
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def dump_golden(data: dict) -> str:
    """One record per line, so a regenerated file diffs case by case."""
    def section(entries: dict) -> str:
        return ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in entries.items())

    return (f'{{\n "written_at_commit": {json.dumps(data["written_at_commit"])},\n'
            f' "generations": {{\n{section(data["generations"])}\n }},\n'
            f' "graphs": {{\n{section(data["graphs"])}\n }}\n}}\n')


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="Write tests/golden/golden.json from the installed unmask.")
    parser.add_argument("--write", action="store_true", help="compute the records and write the file")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing file (behaviour meant to change)")
    args = parser.parse_args(argv)
    if not args.write:
        parser.error("nothing to do: pass --write (see the module docstring)")
    if GOLDEN.exists() and not args.overwrite:
        print(f"{GOLDEN} exists; pass --overwrite only when behaviour is meant to change", file=sys.stderr)
        return 1
    text = dump_golden(compute_golden())
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_text(text, encoding="utf-8")
    print(f"wrote {GOLDEN} ({len(text)} bytes, {len(CASES)} generations, {len(PACKAGES)} graphs)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
