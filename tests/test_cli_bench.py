"""unmask.bench without a model: plan, rows per prompt, ratios, the output folder and the report writers."""

import json
import xml.etree.ElementTree as ET

import pytest

from unmask import ConfigError, GenerationConfig
from unmask import bench


def fake_measure(prompt, config):
    """NFE = steps (or gen_length/4 with a threshold, gen_length/8 on prompt "b"); 10 ms per forward,
    faster with a cache."""
    if config.threshold is not None:
        nfe = config.gen_length // (8 if prompt == "b" else 4)
    else:
        nfe = config.resolved_steps
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
        # L=16: cache none with steps 16 is the baseline itself, so it is measured once
        assert len(cases) == (1 + 3) + (1 + 4)
        assert cases[0].baseline and cases[0].overrides == {
            "gen_length": 16, "steps": 16, "cache": "none", "threshold": None, "factor": None}
        assert cases[4].baseline and cases[4].overrides["steps"] == 32
        assert sum(c.baseline for c in cases) == 2
        assert len({c.name for c in cases}) == len(cases)
        settings = [json.dumps(base.replace(**c.overrides).to_dict(), sort_keys=True) for c in cases]
        assert len(set(settings)) == len(settings)

    def test_default_threshold_row_not_duplicated(self):
        """The default run's threshold row is dropped when the package already decodes with it."""
        base = GenerationConfig(gen_length=16, threshold=bench.DEFAULT_THRESHOLD, cache="dual")
        cases = bench.plan(base, thresholds=[None, bench.DEFAULT_THRESHOLD])
        assert [c.baseline for c in cases] == [True, False]

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
    def test_one_row_per_prompt_and_setting(self, rows):
        assert [(r.name.split()[0], r.prompt) for r in rows] == [
            ("baseline", 0), ("baseline", 1), ("cache=none", 0), ("cache=none", 1),
            ("cache=dual", 0), ("cache=dual", 1)]
        for row in rows:  # the numbers of a row agree with each other
            assert row.nfe * row.tokens_per_forward == pytest.approx(row.tokens) and row.tokens == 16
            assert len(row.steps["tokens"]) == row.nfe and sum(row.steps["tokens"]) == row.tokens
            assert row.runs == 3

    def test_ratios_against_the_same_prompt(self, rows):
        base_a, base_b, none_a, none_b, dual_a, dual_b = rows
        assert base_a.baseline and base_a.nfe == 16 and base_a.tokens_per_forward == 1
        assert base_a.speedup == pytest.approx(1.0)
        assert none_a.nfe == 4 and none_a.nfe_reduction == pytest.approx(4.0) and none_a.speedup == pytest.approx(4.0)
        assert none_b.nfe == 2 and none_b.nfe_reduction == pytest.approx(8.0) and none_b.tokens_per_forward == 8
        assert dual_a.speedup == pytest.approx(16 * 0.011 / (4 * 0.005))
        assert dual_a.steps["tokens"] == [4, 4, 4, 4] and dual_b.steps["tokens"] == [8, 8]

    def test_timeline_marks_warmup(self):
        base = GenerationConfig(gen_length=16)
        timeline = []
        bench.run(None, bench.plan(base, thresholds=[0.9]), ["a"], base=base, runs=2, warmup=1,
                  measure=fake_measure, timeline=timeline)
        assert [(g.measured, g.nfe) for g in timeline] == [(False, 16), (True, 16), (True, 16),
                                                           (False, 4), (True, 4), (True, 4)]
        assert timeline[1].step_seconds == pytest.approx(16 * 0.011)

    def test_bad_runs(self):
        with pytest.raises(ConfigError):
            bench.run(None, [], ["a"], base=GenerationConfig(), runs=0, measure=fake_measure)

    def test_report_and_writers(self, rows, tmp_path):
        doc = bench.report(rows, model={"path": "pkg", "architecture": "llada"},
                           device={"provider": "CPUExecutionProvider", "threads": 2},
                           runs=3, warmup=1, prompts=2)
        assert doc["schema"] == bench.SCHEMA
        paths = bench.write_all(doc, bench.prepare_output(tmp_path / "out"))
        assert paths["chart"].name == "bench.svg"
        loaded = json.loads(paths["json"].read_text())
        assert loaded["rows"][2]["nfe"] == 4 and loaded["rows"][2]["prompt"] == 0
        table = paths["markdown"].read_text()
        assert table.count("\n| ") == 1 + 6  # header + one line per prompt and setting
        assert "4.00x" in table and "8.00x" in table
        assert not list(tmp_path.joinpath("out").glob("*.tmp"))

    def test_terminal_table(self, rows):
        doc = bench.report(rows, model={"path": "pkg"}, device={}, runs=3, warmup=1, prompts=2)
        lines = bench.summary(doc).splitlines()
        assert lines[:2] == ["prompt 1: a", "prompt 2: b"]
        header = lines[2].split()
        assert header[:5] == ["setting", "prompt", "NFE", "tokens", "tokens/forward"]
        body = [line.split() for line in lines[3:]]
        assert len(body) == 6
        for cells in body:  # name words, then prompt, NFE, tokens, tokens/forward, ...
            numbers = cells[-9:]
            prompt, nfe, tokens, per_forward = int(numbers[0]), int(numbers[1]), int(numbers[2]), float(numbers[3])
            assert prompt in (1, 2) and nfe * per_forward == pytest.approx(tokens)

    def test_chart_one_labelled_line_per_setting(self, rows):
        doc = bench.report(rows, model={"path": "pkg"}, device={}, runs=3, warmup=1, prompts=2)
        svg = ET.fromstring(bench.svg_chart(doc))
        ns = "{http://www.w3.org/2000/svg}"
        polylines = svg.findall(f".//{ns}polyline")
        settings = [r.name for r in rows if r.prompt == 0]
        assert len(polylines) == 2 * 3  # two panels (time, tokens), one line per setting
        assert [p.find(f"{ns}title").text for p in polylines] == settings * 2
        texts = [t.text for t in svg.iter(f"{ns}text")]
        assert set(settings) <= set(texts)  # the legend names each setting
        assert {"time per step (ms)", "tokens committed per step", "step (forward pass)"} <= set(texts)
        colors = [p.get("stroke") for p in polylines]
        assert len(set(colors[:3])) == 3 and colors[:3] == colors[3:]
        tokens_panel = polylines[3:]  # the threshold line has 4 points (4 steps), the baseline 16
        assert [len(p.get("points").split()) for p in tokens_panel] == [16, 4, 4]


class TestOutputFolder:
    def test_existing_refused_unless_force(self, tmp_path):
        (tmp_path / "out").mkdir()
        with pytest.raises(ConfigError, match="already exists; pass --force"):
            bench.prepare_output(tmp_path / "out")
        assert bench.prepare_output(tmp_path / "out", force=True) == tmp_path / "out"

    def test_file_and_unwritable(self, tmp_path):
        (tmp_path / "f").write_text("x")
        with pytest.raises(ConfigError, match="not a folder"):
            bench.prepare_output(tmp_path / "f", force=True)
        with pytest.raises(ConfigError, match="cannot write bench results to /proc/nope"):
            bench.prepare_output("/proc/nope")


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


class TestProfile:
    """`unmask bench --profile` on the embedded model: a real ORT trace, summarised."""

    def test_trace_and_top_operators(self, tmp_path, capsys):
        from unmask.cli import main

        prompts = tmp_path / "p.txt"
        prompts.write_text("What is 12 + 30?\n")
        out = tmp_path / "b"
        code = main(["bench", "--profile", "--runs", "2", "--warmup", "1", "--prompts", str(prompts),
                     "--threads", "1", "--out", str(out)])
        captured = capsys.readouterr()
        assert code == 0, captured.err
        trace = json.loads((out / "ort_profile.json").read_text())
        doc = json.loads((out / "bench.json").read_text())
        profile = doc["profile"]
        model_runs = [e for e in trace if e.get("cat") == "Session" and e.get("name") == "model_run"]
        measured = sum(row["nfe"] * row["runs"] for row in doc["rows"])
        warmup = sum(row["nfe"] for row in doc["rows"])  # one warm-up run per setting, same prompt
        assert len(model_runs) == measured + warmup  # the trace covers every pass...
        assert profile["forwards"] == measured  # ...the summary only the measured ones
        ops = profile["operators"]
        ranked = [o for o in ops if not o["op_type"].startswith("other (")]  # the rest, summed, comes last
        assert ranked and [o["seconds"] for o in ranked] == sorted((o["seconds"] for o in ranked), reverse=True)
        assert len({o["op_type"] for o in ops}) == len(ops)
        assert 0 < sum(o["share"] for o in ops) <= 1.0
        assert profile["kernel_seconds"] <= profile["step_seconds"]
        kinds = {o["op_type"]: o["kind"] for o in ops}
        assert "matmul" in kinds.values() and all(k for k in kinds.values())
        assert "ONNX Runtime operators over the measured runs" in captured.out
        assert "share of step time" in (out / "bench.md").read_text()

    def test_summary_of_a_trace(self, tmp_path):
        """A hand-written trace: one warm-up pass, two measured ones; only the measured kernels count."""
        from unmask import op_profile

        def run(ts):
            return {"cat": "Session", "name": "model_run", "ts": ts, "dur": 100}

        def kernel(ts, op, dur):
            return {"cat": "Node", "name": f"n{ts}_kernel_time", "ts": ts, "dur": dur, "args": {"op_name": op}}

        events = [run(0), kernel(10, "MatMul", 90),  # warm-up
                  run(1000), kernel(1010, "MatMul", 40), kernel(1060, "GroupQueryAttention", 20),
                  run(2000), kernel(2010, "MatMul", 40), kernel(2060, "Softmax", 10)]
        trace = tmp_path / "t.json"
        trace.write_text(json.dumps(events))
        timeline = [bench.Generation(False, 1, 1.0), bench.Generation(True, 2, 400e-6)]
        summary = op_profile.summarize(trace, timeline)
        assert summary["forwards"] == 2 and summary["note"] == ""
        assert [(o["op_type"], o["kind"], o["calls"]) for o in summary["operators"]] == [
            ("MatMul", "matmul", 2), ("GroupQueryAttention", "attention", 1), ("Softmax", "attention", 1)]
        assert [o["share"] for o in summary["operators"]] == pytest.approx([0.2, 0.05, 0.025])

        mismatched = op_profile.summarize(trace, [bench.Generation(True, 2, 400e-6)])
        assert mismatched["forwards"] == 3 and "could not be left out" in mismatched["note"]
