"""unmask.evaluate and `unmask eval`: task specs, bad input, per-family scores, and the
embedded model's held-out exact match.

The issue's target for the shipped model is >= 90% on 50 held-out examples, asserted
here with the package's default decoding, and tool calls must stay (nearly) all right.
"""

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

import unmask
from unmask import people, tasks
from unmask.cli import cli
from unmask.evaluate import TASKS_FILE, EvalReport, TaskSpec, evaluate, read_task_spec, write_task_spec
from unmask.model import DEFAULT_MODEL

EMBEDDED = Path(unmask.__file__).parent.joinpath(*DEFAULT_MODEL)  # as unmask.load() finds it
needs_embedded = pytest.mark.skipif(
    not (EMBEDDED / "unmask.json").is_file(),
    reason="this install has no embedded model (ship one: python -m training.ship_default CKPT)",
)
SCORE_KEYS = {"name", "examples", "correct", "nfe", "tokens", "seconds", "accuracy", "tokens_per_forward",
              "tokens_per_second"}
ACCURACY_LIMIT = 50  # held-out examples in the accuracy check (10 per family)
TARGET = 0.90  # issue 7: the shipped model's held-out exact match on ACCURACY_LIMIT examples
# The shipped package measured 48/50 overall (tool_call, list and extract 10/10, arithmetic and units
# 9/10) with `unmask eval --limit 50 --threads 2` (greedy, fixed held-out set, so deterministic on one
# machine); on 200 examples it is 96.0% int8 and 95.0% fp32, on 500 96.0% fp32.
FLOOR = {"tool_call": 9}  # correct answers out of 10 per family


@pytest.fixture(scope="module")
def embedded():
    if not (EMBEDDED / "unmask.json").is_file():
        pytest.skip("this install has no embedded model (ship one: python -m training.ship_default CKPT)")
    return unmask.load(threads=2)


@pytest.fixture
def package_without_tasks(tmp_path):
    if not (EMBEDDED / "unmask.json").is_file():
        pytest.skip("this install has no embedded model to copy")
    folder = tmp_path / "pkg"
    shutil.copytree(EMBEDDED, folder, ignore=shutil.ignore_patterns(TASKS_FILE))
    return folder


def spy_on(model, monkeypatch) -> list:
    """The messages of every model.generate call from now on, in order (the calls still run)."""
    seen = []
    real = model.generate

    def spy(prompt=None, *, messages=None, **kwargs):
        seen.append(messages)
        return real(prompt, messages=messages, **kwargs)

    monkeypatch.setattr(model, "generate", spy)
    return seen


def invoke(*args):
    return CliRunner().invoke(cli, ["eval", *args], catch_exceptions=True)


@pytest.fixture(scope="module")
def accuracy_run():
    """`unmask eval --json` on the embedded model with its default settings."""
    if not (EMBEDDED / "unmask.json").is_file():
        pytest.skip("this install has no embedded model (ship one: python -m training.ship_default CKPT)")
    result = invoke("--limit", str(ACCURACY_LIMIT), "--threads", "2", "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


class TestTaskSpec:
    def test_round_trip(self, tmp_path):
        spec = TaskSpec(("units", "tool_call"), 40)
        write_task_spec(spec, tmp_path)
        assert read_task_spec(tmp_path) == spec

    def test_missing_says_what_can_be_evaluated(self, tmp_path):
        with pytest.raises(unmask.ModelFormatError, match="declares no task families.*can evaluate nothing"):
            read_task_spec(tmp_path)

    @pytest.mark.parametrize("content, match", [
        ({"generator": "other", "families": ["units"], "gen_length": 40}, "generator"),
        ({"generator": "unmask.tasks", "families": ["poetry"], "gen_length": 40}, "unknown families"),
        ({"generator": "unmask.tasks", "families": [], "gen_length": 40}, "non-empty"),
        ({"generator": "unmask.tasks", "families": ["units"], "gen_length": 0}, "gen_length"),
    ])
    def test_bad_content(self, tmp_path, content, match):
        (tmp_path / TASKS_FILE).write_text(json.dumps(content))
        with pytest.raises(unmask.ModelFormatError, match=match):
            read_task_spec(tmp_path)

    @needs_embedded
    def test_embedded_declares_every_family(self):
        assert read_task_spec(EMBEDDED) == TaskSpec(tasks.FAMILIES, tasks.GEN_LENGTH)


class TestEvaluate:
    def test_package_without_tasks_json(self, package_without_tasks):
        with pytest.raises(unmask.ModelFormatError, match="declares no task families"):
            evaluate(package_without_tasks, limit=1, threads=1)

    def test_unknown_family_lists_valid_ones(self, embedded):
        with pytest.raises(unmask.ConfigError, match="tool_call, arithmetic, list, units, extract"):
            evaluate(embedded, families=["poetry"], limit=1)

    @pytest.mark.parametrize("limit", [0, -3, 2.5, True])
    def test_bad_limit(self, embedded, limit):
        with pytest.raises(unmask.ConfigError, match="limit"):
            evaluate(embedded, limit=limit)

    def test_limit_beyond_the_heldout_split(self, embedded):
        with pytest.raises(unmask.ConfigError, match=r"limit 1000 asks for more .*\['units'\].*smaller limit"):
            evaluate(embedded, families=["units"], limit=1000)

    def test_bad_setting_is_rejected_before_generating(self, embedded):
        with pytest.raises(unmask.ConfigError, match="block_length"):
            evaluate(embedded, limit=1, block_length=7)

    def test_per_family_counts_and_totals(self, embedded):
        report = evaluate(embedded, families=["units", "list"], limit=5, threshold=0.9, cache="dual")
        assert isinstance(report, EvalReport)
        assert [s.name for s in report.families] == ["units", "list"]
        assert [s.examples for s in report.families] == [3, 2]  # even split, remainder to the first
        assert report.overall.examples == 5 == len(report.answers)
        assert report.overall.correct == sum(s.correct for s in report.families)
        assert report.overall.nfe == sum(a.nfe for a in report.answers)
        assert report.config.gen_length == tasks.GEN_LENGTH and report.config.block_length is None
        assert report.config.threshold == 0.9 and report.config.cache == "dual"
        for a in report.answers:
            assert a.correct == tasks.exact_match(a.prediction, a.answer)
            assert 1 <= a.nfe <= tasks.GEN_LENGTH

    def test_follow_up_asks_after_earlier_answered_turns(self, embedded, monkeypatch):
        seen = spy_on(embedded, monkeypatch)
        report = evaluate(embedded, families=["units"], limit=3, follow_up=2, cache="dual", threshold=0.9)
        assert report.overall.examples == 3 and len(seen) == 3
        heldout = {ex.prompt: ex.answer for ex in tasks.make_examples("heldout", 3, seed=1)}
        for messages, answer in zip(seen, report.answers):
            assert [m["role"] for m in messages] == ["user", "assistant"] * 2 + ["user"]
            assert messages[-1]["content"] == answer.prompt
            for question, reply in zip(messages[0:4:2], messages[1:4:2]):
                assert heldout[question["content"]] == reply["content"]  # earlier turns answered correctly
        assert seen[0][0] != seen[1][0]  # each question gets its own history

    def test_loose_asks_the_questions_as_typed_in_a_chat(self, embedded, monkeypatch):
        asked = spy_on(embedded, monkeypatch)
        report = evaluate(embedded, families=["units", "tool_call"], limit=4, loose=True, cache="dual", threshold=0.9)
        seen = [messages[-1]["content"] for messages in asked]
        canonical = tasks.make_examples("heldout", 4, families=["units", "tool_call"])
        assert seen == [tasks.loosen(ex.prompt) for ex in canonical] == [a.prompt for a in report.answers]
        assert all(q != ex.prompt and not q.endswith((".", "?")) and not q[0].isupper()
                   for q, ex in zip(seen, canonical))
        assert [a.answer for a in report.answers] == [ex.answer for ex in canonical]  # the same expected answers
        assert report.loose and report.to_dict()["loose"] is True

    def test_bad_loose(self, embedded):
        with pytest.raises(unmask.ConfigError, match="loose"):
            evaluate(embedded, limit=1, loose="yes")

    @pytest.mark.parametrize("follow_up", [-1, 9, 1.5, True])
    def test_bad_follow_up(self, embedded, follow_up):
        with pytest.raises(unmask.ConfigError, match="follow_up"):
            evaluate(embedded, limit=1, follow_up=follow_up)

    @pytest.mark.parametrize("heldout", ["phrasing", "values", "ood"])
    def test_each_people_set_asks_its_own_questions(self, embedded, monkeypatch, heldout):
        seen = spy_on(embedded, monkeypatch)
        report = evaluate(embedded, limit=6, heldout=heldout, cache="dual", threshold=0.9)
        expected = people.make_set(heldout, 6)
        assert [m[-1]["content"] for m in seen] == [ex.prompt for ex in expected] == [a.prompt for a in report.answers]
        assert all(len(m) == 1 for m in seen)  # single turns
        assert [a.answer for a in report.answers] == [ex.answer for ex in expected]
        assert [s.name for s in report.families] == list(people.SET_FAMILIES[heldout])
        assert report.heldout == heldout and report.to_dict()["set"] == heldout and report.alone is None

    def test_followup_set_is_also_scored_alone(self, embedded, monkeypatch):
        seen = spy_on(embedded, monkeypatch)
        report = evaluate(embedded, families=["units", "list"], limit=4, heldout="followup", cache="dual",
                          threshold=0.9)
        expected = people.make_set("followup", 4, ["units", "list"])
        with_turns, alone = seen[:4], seen[4:]
        for messages, example in zip(with_turns, expected):
            assert len(messages) == 2 * len(example.history) + 1 >= 3
            assert [(q["content"], r["content"]) for q, r in zip(messages[0:-1:2], messages[1::2])] == \
                list(example.history)
        assert [m for m in alone] == [[{"role": "user", "content": ex.prompt}] for ex in expected]
        assert [s.name for s in report.alone] == ["units", "list", "overall"]
        assert report.alone[-1].examples == 4
        assert report.to_dict()["alone"]["overall"]["examples"] == 4

    @pytest.mark.parametrize("kwargs, message", [
        (dict(heldout="nope"), "unknown held-out set"),
        (dict(heldout="followup", follow_up=1), "brings its own earlier turns"),
        (dict(heldout="values", families=["units"]), "values set has no units"),
        (dict(heldout="ood", families=["units"]), "only ood questions"),
        (dict(heldout="phrasing", families=["nope"]), "unknown task family"),
    ])
    def test_bad_set_arguments(self, embedded, kwargs, message):
        with pytest.raises(unmask.ConfigError, match=message):
            evaluate(embedded, limit=2, **kwargs)

    def test_baseline_commits_one_token_per_forward(self, embedded):
        report = evaluate(embedded, families=["arithmetic"], limit=2, cache="none", threshold=None)
        assert report.overall.nfe == 2 * tasks.GEN_LENGTH
        assert report.overall.tokens_per_forward == 1.0


class TestCli:
    def test_embedded_model_meets_the_target(self, accuracy_run):
        overall = accuracy_run["overall"]
        assert overall["examples"] == ACCURACY_LIMIT
        assert overall["accuracy"] >= TARGET, accuracy_run["families"]

    def test_embedded_model_gets_tool_calls_right(self, accuracy_run):
        assert accuracy_run["families"]["tool_call"]["correct"] >= FLOOR["tool_call"], accuracy_run["families"]

    def test_json_schema(self, accuracy_run):
        assert set(accuracy_run) == {"package", "precision", "split", "set", "loose", "config", "families", "overall"}
        assert accuracy_run["split"] == "heldout" and accuracy_run["precision"] == "int8"
        assert accuracy_run["set"] == "split"
        assert accuracy_run["loose"] is False
        assert list(accuracy_run["families"]) == list(tasks.FAMILIES)
        for score in [*accuracy_run["families"].values(), accuracy_run["overall"]]:
            assert set(score) == SCORE_KEYS
            assert score["accuracy"] == pytest.approx(score["correct"] / score["examples"])
            assert score["tokens_per_forward"] == pytest.approx(score["tokens"] / score["nfe"])
        assert accuracy_run["config"]["gen_length"] == tasks.GEN_LENGTH

    @needs_embedded
    def test_table_has_a_row_per_family(self):
        result = invoke("--limit", "3", "--family", "units", "--family", "extract,list", "--threshold", "0.9")
        assert result.exit_code == 0, result.output
        rows = [line.split()[0] for line in result.output.splitlines()[3:]]
        assert rows == ["units", "extract", "list", "overall"]
        assert "threshold 0.9" in result.output.splitlines()[0]

    @needs_embedded
    def test_answers_in_json(self):
        result = invoke("--limit", "2", "--json", "--answers", "--threshold", "0.9")
        assert result.exit_code == 0, result.output
        answers = json.loads(result.output)["answers"]
        assert [a["family"] for a in answers] == ["tool_call", "arithmetic"]
        assert set(answers[0]) == {"family", "prompt", "answer", "prediction", "correct", "nfe", "tokens", "seconds"}

    @needs_embedded
    def test_loose_flag(self):
        result = invoke("--limit", "2", "--family", "units", "--loose", "--threshold", "0.9")
        assert result.exit_code == 0, result.output
        assert "2 held-out examples typed loosely" in result.output.splitlines()[0]
        result = invoke("--limit", "1", "--family", "units", "--loose", "--json", "--answers")
        document = json.loads(result.output)
        assert document["loose"] is True
        assert document["answers"][0]["prompt"] == tasks.loosen(tasks.make_examples("heldout", 1, families=["units"])[0].prompt)

    @needs_embedded
    def test_set_flag(self):
        result = invoke("--set", "followup", "--limit", "2", "--family", "units", "--threshold", "0.9")
        assert result.exit_code == 0, result.output
        lines = result.output.splitlines()
        assert "2 held-out examples of the followup set" in lines[0]
        assert "the same questions asked alone:" in lines
        result = invoke("--set", "ood", "--limit", "2", "--json", "--answers")
        document = json.loads(result.output)
        assert document["set"] == "ood" and list(document["families"]) == ["ood"]
        assert [a["answer"] for a in document["answers"]] == [people.REFUSAL] * 2
        result = invoke("--set", "everything")
        assert result.exit_code != 0 and "everything" in result.output

    @needs_embedded
    def test_answers_needs_json(self):
        result = invoke("--answers")
        assert result.exit_code == 2 and "--json" in result.output

    @needs_embedded
    def test_unknown_family(self):
        result = invoke("--family", "poetry", "--limit", "1")
        assert isinstance(result.exception, unmask.ConfigError)
        assert "tool_call, arithmetic, list, units, extract" in str(result.exception)

    def test_package_without_tasks_json(self, package_without_tasks):
        result = invoke(str(package_without_tasks), "--limit", "1")
        assert isinstance(result.exception, unmask.ModelFormatError)
        assert "can evaluate nothing" in str(result.exception)

    def test_help_lists_generation_flags(self):
        result = invoke("--help")
        assert result.exit_code == 0
        for flag in ("--family", "--limit", "--json", "--loose", "--threshold", "--cache", "--steps", "--gen-length"):
            assert flag in result.output
