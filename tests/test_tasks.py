"""unmask.tasks: deterministic generator, disjoint splits, correct answers, chat format, scoring."""

import hashlib
import itertools
import json
import random
import re

import jinja2
import pytest

from unmask import tasks
from arithmetic_prompts import read_question


class TestGenerator:
    def test_deterministic(self):
        assert tasks.make_examples("train", 50, seed=3) == tasks.make_examples("train", 50, seed=3)
        assert tasks.make_examples("train", 50, seed=3) != tasks.make_examples("train", 50, seed=4)

    def test_balanced_and_distinct(self):
        examples = tasks.make_examples("heldout", 103)
        counts = {f: sum(e.family == f for e in examples) for f in tasks.FAMILIES}
        assert sorted(counts.values()) == [20, 20, 21, 21, 21]
        assert len({e.prompt for e in examples}) == 103

    def test_splits_do_not_overlap(self):
        heldout = {e.prompt for e in tasks.make_examples("heldout", 500)}
        train = {e.prompt for e in tasks.make_examples("train", 3000)}
        assert not heldout & train
        assert all(tasks.split_of(p) == "heldout" for p in heldout)

    def test_tool_calls_are_json_calls(self):
        names = set()
        for ex in tasks.make_examples("train", 300, families=["tool_call"]):
            call = json.loads(ex.answer)
            assert set(call) == {"name", "arguments"}
            names.add(call["name"])
        assert names == {"get_weather", "set_timer", "send_message", "create_event", "set_thermostat", "set_device"}

    def test_arithmetic_answers(self):
        for ex in tasks.make_examples("train", 200, families=["arithmetic"]):
            assert int(ex.answer) == read_question(ex.prompt)[3] >= 0

    def test_arithmetic_operand_drawer_sets_the_terms_of_sums_and_differences(self):
        rng, seen = random.Random(3), set()
        for _ in range(60):
            ex = tasks.arithmetic(rng, lambda r: 7)
            a, op, b, _ = read_question(ex.prompt)
            seen.add(op)
            if op != "*":
                assert (a, b) == ("7", "7") and ex.answer == {"+": "14", "-": "0"}[op]
        assert seen == {"+", "-", "*"}

    def test_arithmetic_ops_restrict_the_operation_and_default_keeps_the_stream(self):
        assert {read_question(tasks.arithmetic(random.Random(i), ops="-").prompt)[1] for i in range(40)} == {"-"}
        default = [tasks.arithmetic(random.Random(i)) for i in range(40)]
        assert default == [tasks.arithmetic(random.Random(i), ops="+-*") for i in range(40)]
        for bad in ("", "/", "+x"):
            with pytest.raises(ValueError, match="ops must be drawn from"):
                tasks.arithmetic(random.Random(0), ops=bad)

    def test_heldout_split_is_pinned(self):
        """Reported accuracies are on this exact held-out stream: a generator change that
        moves it must be deliberate (update the digest and re-measure the README table)."""
        examples = tasks.make_examples("heldout", 500)
        digest = hashlib.sha256(repr([(e.family, e.prompt, e.answer) for e in examples]).encode()).hexdigest()
        assert digest == "eba77579ccbf934c8318379dcc186b00a6cc8952197df231ac38b38fb9a9ed1a"

    def test_list_answers(self):
        for ex in tasks.make_examples("train", 100, families=["list"]):
            items = ex.prompt.split(": ", 1)[1].split(", ")
            result = ex.answer.split(", ")
            if ex.prompt.startswith("Reverse"):
                assert result == items[::-1]
            else:
                key = int if items[0].isdigit() else str
                assert result == sorted(items, key=key)

    def test_unit_answers(self):
        factors = {(big, small): f for big, small, f in tasks.CONVERSIONS}
        for ex in tasks.make_examples("train", 100, families=["units"]):
            value, src = re.search(r"(\d+) (\w+)( to|\?| in)", ex.prompt).groups()[:2]
            out, dst = ex.answer.split()
            if (src, dst) in factors:
                assert int(out) == int(value) * factors[(src, dst)]
            else:
                assert int(out) * factors[(dst, src)] == int(value)

    def test_extract_answer_is_in_context(self):
        for ex in tasks.make_examples("train", 50, families=["extract"]):
            assert ex.answer in ex.prompt.split("\nQuestion:")[0]

    def test_bad_input(self):
        with pytest.raises(ValueError, match="split"):
            tasks.make_examples("test", 1)
        with pytest.raises(ValueError, match="families"):
            tasks.make_examples("train", 1, families=["poetry"])


class TestLoosen:
    def test_drops_the_final_mark_and_lowercases_the_start(self):
        assert tasks.loosen("Set a timer for 7 minutes.") == "set a timer for 7 minutes"
        assert tasks.loosen("12 hours in minutes?") == "12 hours in minutes"
        assert tasks.loosen("Sort these: 3, 1") == "sort these: 3, 1"
        assert tasks.loosen("Context: Kim paid.\nQuestion: Who?") == "context: Kim paid.\nQuestion: Who"

    def test_random_forms(self):
        rng = random.Random(0)
        forms = {tasks.loosen("Set a timer for 7 minutes.", rng) for _ in range(200)}
        assert forms == {"Set a timer for 7 minutes", "set a timer for 7 minutes.", "set a timer for 7 minutes"}

    def test_every_heldout_question_changes(self):
        assert all(tasks.loosen(ex.prompt) != ex.prompt for ex in tasks.make_examples("heldout", 500))

    def test_loosened_training_prompts_are_never_heldout_prompts(self):
        heldout = {e.prompt for e in itertools.islice(tasks.iter_examples("heldout"), 5000)}
        rng = random.Random(1)
        train = list(itertools.islice(tasks.iter_examples("train"), 10000))
        loosened = {tasks.loosen(e.prompt, rng) for e in train} | {tasks.loosen(e.prompt) for e in train}
        assert len(heldout) > 2000 and len(loosened) > 5000 and not loosened & heldout


class TestChatFormat:
    def test_chat_prompt_matches_template(self):
        rendered = jinja2.Template(tasks.CHAT_TEMPLATE).render(
            messages=[{"role": "user", "content": "What is 2 + 2?"}], bos_token=tasks.BOS, add_generation_prompt=True)
        assert rendered == tasks.chat_prompt("What is 2 + 2?")
        assert rendered.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")

    def test_chat_prompt_with_history_matches_template(self):
        history = [(" Set a timer for 5 minutes. ", '{"name":"set_timer","arguments":{"minutes":5}}'),
                   ("What is 2 + 2?", "4")]
        messages = [{"role": r, "content": c} for u, a in history for r, c in (("user", u), ("assistant", a))]
        rendered = jinja2.Template(tasks.CHAT_TEMPLATE).render(
            messages=messages + [{"role": "user", "content": "Reverse: a, b"}], bos_token=tasks.BOS,
            add_generation_prompt=True)
        assert rendered == tasks.chat_prompt("Reverse: a, b", history)
        assert rendered.count(tasks.BOS) == 1 and rendered.count(tasks.EOT) == 5


class TestScoring:
    def test_exact_match_stops_at_end_tokens(self):
        assert tasks.exact_match(" 42<|eot_id|><|endoftext|><|endoftext|>", "42")
        assert tasks.exact_match("42<|endoftext|>7", "42")
        assert not tasks.exact_match("420", "42")

    def test_score_per_family(self):
        examples = [tasks.Example("list", "p", "a"), tasks.Example("list", "q", "b"), tasks.Example("units", "r", "c")]
        result = tasks.score(examples, ["a", "x", "c"])
        assert result == {"list": 0.5, "units": 1.0, "overall": 2 / 3}
        with pytest.raises(ValueError):
            tasks.score(examples, ["a"])
