"""unmask.bench without a model: plan, medians, ratios and the three report writers."""

import json
import sys
import xml.etree.ElementTree as ET

import pytest

from unmask import ConfigError, GenerationConfig
from unmask import bench


def fake_measure(prompt, config):
    """NFE = steps (or gen_length/4 with a threshold); 10 ms per forward, faster with a cache."""
    nfe = config.gen_length // 4 if config.threshold is not None else config.resolved_steps
    forward = 0.010 if config.cache in (None, "none") else 0.004
    per_step = [config.gen_length // nfe] * nfe
    return bench.RunRecord(
        nfe=nfe, tokens=config.gen_length, total_seconds=nfe * (forward + 0.001),
        time_to_first_block=forward, forward_seconds=[forward] * nfe, host_seconds=[0.001] * nfe,
        tokens_per_step=per_step, peak_rss=100 << 20,
    )


class TestPlan:
    def test_baseline_first_per_gen_length(self):
        base = GenerationConfig(gen_length=32, steps=16, block_length=8)
        cases = bench.plan(base, caches=["none", "dual"], thresholds=[None, 0.9], gen_lengths=[16, 32])
        assert len(cases) == 2 * (1 + 4)
        assert cases[0].baseline and cases[0].overrides == {
            "gen_length": 16, "steps": 16, "cache": "none", "threshold": None, "factor": None}
        assert cases[5].baseline and cases[5].overrides["steps"] == 32
        assert sum(c.baseline for c in cases) == 2
        assert len({c.name for c in cases}) == len(cases)

    def test_invalid_case_named(self):
        base = GenerationConfig(gen_length=32, block_length=8)
        with pytest.raises(ConfigError, match="bench case .*L=12"):
            bench.plan(base, gen_lengths=[12])

    def test_parse_list(self):
        assert bench.parse_list(None, float) == [None]
        assert bench.parse_list("0.9, 0.7", float) == [0.9, 0.7]


@pytest.fixture(scope="module")
def rows():
    base = GenerationConfig(gen_length=16)
    cases = bench.plan(base, caches=["none", "dual"], thresholds=[0.9])
    seen = []
    rows = bench.run(None, cases, ["a", "b"], base=base, runs=3, warmup=1, measure=fake_measure,
                     on_progress=lambda name, done, total: seen.append((done, total)))
    assert seen[-1] == (3 * 2 * 4, 3 * 2 * 4)
    return rows


class TestRun:
    def test_medians_and_ratios(self, rows):
        baseline, none, dual = rows
        assert baseline.baseline and baseline.nfe == 16 and baseline.tokens_per_forward == 1
        assert baseline.speedup == pytest.approx(1.0)
        assert none.nfe == 4 and none.nfe_reduction == pytest.approx(4.0)
        assert none.speedup == pytest.approx(4.0)
        assert dual.speedup == pytest.approx(16 * 0.011 / (4 * 0.005))
        assert dual.runs == 6 and dual.steps["tokens"] == [4, 4, 4, 4]

    def test_bad_runs(self):
        with pytest.raises(ConfigError):
            bench.run(None, [], ["a"], base=GenerationConfig(), runs=0, measure=fake_measure)

    def test_report_and_writers(self, rows, tmp_path, monkeypatch):
        doc = bench.report(rows, model={"path": "pkg", "architecture": "llada"},
                           device={"provider": "CPUExecutionProvider", "threads": 2},
                           runs=3, warmup=1, prompts=2)
        assert doc["schema"] == bench.SCHEMA
        monkeypatch.setitem(sys.modules, "matplotlib", None)  # force the SVG fallback
        paths = bench.write_all(doc, tmp_path / "out")
        assert paths["chart"].name == "bench.svg"
        loaded = json.loads(paths["json"].read_text())
        assert loaded["rows"][1]["nfe"] == 4
        table = paths["markdown"].read_text()
        assert table.count("\n| ") == 1 + 3  # header + one line per row
        assert "4.00x" in table
        svg = ET.fromstring(paths["chart"].read_text())
        polylines = svg.findall(".//{http://www.w3.org/2000/svg}polyline")
        assert len(polylines) == 2 * 3  # two panels, one line per row
        assert not list(tmp_path.joinpath("out").glob("*.tmp"))


class TestPrompts:
    def test_plain_and_jsonl(self, tmp_path):
        plain = tmp_path / "p.txt"
        plain.write_text("one\n\ntwo\n")
        assert bench.read_prompts(plain) == ["one", "two"]
        jsonl = tmp_path / "p.jsonl"
        jsonl.write_text('{"prompt": "x"}\n{"messages": [{"role": "user", "content": "y"}]}\n')
        assert bench.read_prompts(jsonl) == ["x", [{"role": "user", "content": "y"}]]

    def test_bad_files(self, tmp_path):
        with pytest.raises(ConfigError, match="cannot read"):
            bench.read_prompts(tmp_path / "missing.txt")
        bad = tmp_path / "b.jsonl"
        bad.write_text("{nope\n")
        with pytest.raises(ConfigError, match="b.jsonl:1"):
            bench.read_prompts(bad)
