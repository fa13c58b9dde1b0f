"""The pieces of `unmask serve` without a server: the committed prefix, schema templates,
request fields, tool calls, options, and the package's isolation from the rest of unmask."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import unmask
from unmask.serve.app import warn_if_exposed
from unmask.serve.errors import ApiError
from unmask.serve.fields import Fields, check_messages, setting_kinds, stop_list
from unmask.serve.options import ServeOptions
from unmask.serve.prefix import CommittedPrefix, TemplatePrefix
from unmask.serve.structured import Layout, Vocabulary
from unmask.serve.tools import Tool, could_be_call, forced_tool, parse_tools, read_call

# A tiny character vocabulary: id -> text; 0 is end-of-text, 1 the mask.
CHARS = ["<eos>", "<mask>"] + list('abcdefghijklmnopqrstuvwxyz0123456789 ,.:{}"\\é')
ID = {c: i for i, c in enumerate(CHARS)}


def decode(ids):
    return "".join(CHARS[i] for i in ids if i > 1)


def encode(text):
    return [ID[c] for c in text]


class TestCommittedPrefix:
    def prefix(self, **kw):
        return CommittedPrefix(decode, length=8, stop_ids=(0,), **kw)

    def test_only_the_left_run_is_sent_and_the_last_token_waits(self):
        p = self.prefix()
        p.commit(np.array([2, 3]), np.array(encode("cd")))
        assert p.delta() == ""  # nothing committed at the left edge
        p.commit(np.array([0]), np.array(encode("a")))
        assert p.delta() == ""  # "a" is the last token of the prefix: held back
        p.commit(np.array([1]), np.array(encode("b")))
        assert p.delta() == "abc"  # prefix "abcd", its last token held
        assert p.finish_reason is None

    def test_stop_token_ends_the_answer(self):
        p = self.prefix()
        p.commit(np.array([0, 1, 2, 5]), np.array(encode("hi") + [0] + encode("x")))
        assert p.finish_reason == "stop" and p.text == "hi" and p.delta() == "hi"
        assert p.answer_ids.tolist() == encode("hi")

    def test_a_possible_stop_string_start_is_held(self):
        p = self.prefix(stops=[", "])
        p.commit(np.arange(4), np.array(encode("ab,c")))
        assert p.delta() == "ab"  # "c" held as the last token, "," as a possible start of ", "
        p.commit(np.array([4]), np.array(encode("d")))
        assert p.delta() == ",c" and p.finish_reason is None

    def test_stop_string_split_over_steps_is_never_sent(self):
        p = self.prefix(stops=[", "])
        p.commit(np.arange(3), np.array(encode("ab,")))
        assert p.delta() == "ab"
        p.commit(np.array([3, 4]), np.array(encode(" x")))
        assert p.finish_reason == "stop" and p.text == "ab" and p.delta() == ""
        assert p.answer_ids.tolist() == encode("ab, ")  # the stop string was generated, "x" was not

    @given(st.lists(st.sampled_from(["a", "b", " ", ",", "."]), min_size=1, max_size=12), st.randoms())
    @settings(max_examples=200, deadline=None)
    def test_sent_text_is_never_taken_back(self, pieces, rng):
        """Whatever the commit order, and with a decoder that respaces (" ," -> ","), the text sent
        so far is always a prefix of the final answer, and all of it is sent in the end."""
        def respacing(ids):
            return decode(ids).replace(" ,", ",").replace(" .", ".")

        ids = encode("".join(pieces))
        p = CommittedPrefix(respacing, length=len(ids) + 1, stop_ids=(0,))
        order = list(range(len(ids) + 1))
        rng.shuffle(order)
        tokens = ids + [0]
        for position in order:
            p.commit(np.array([position]), np.array([tokens[position]]))
            p.delta()
            assert respacing(ids).startswith(p.sent)
        p.close()
        p.delta()
        assert p.sent == respacing(ids) == p.text

    def test_limit(self):
        p = self.prefix(limit=3)
        p.commit(np.arange(8), np.array(encode("abcdefgh")))
        assert p.finish_reason == "length" and p.text == "abc"

    def test_incomplete_character_is_held(self):
        p = CommittedPrefix(lambda ids: "ab\ufffd" if len(ids) == 3 else "ab", length=8)
        p.commit(np.arange(4), np.array([5, 6, 7, 8]))
        assert p.delta() == "ab"

    def test_close_takes_what_is_committed(self):
        p = self.prefix()
        p.commit(np.array([0, 1]), np.array(encode("ok")))
        p.close()
        assert p.finish_reason == "length" and p.text == "ok"


class TestLayout:
    @pytest.fixture
    def vocab(self):
        return Vocabulary(decode, len(CHARS), {0, 1}, filler=0)

    def test_template_pins_the_frame_and_renders_values(self, vocab):
        schema = {"type": "object", "properties": {"n": {"type": "integer", "maximum": 99},
                                                   "s": {"type": "string", "maxLength": 3}}}
        layout = Layout(vocab, encode, 1, schema)
        template = layout.template(layout.length + 2)
        holes = np.flatnonzero(template == 1)
        assert decode(template[:holes[0]]) == '{"n":'
        assert template[-2:].tolist() == [0, 0]  # after the layout: end-of-text
        prefix = TemplatePrefix(decode, layout, template, 1)
        assert prefix.delta() == '{"n":'
        values = encode("07") + encode("x") + [0, 0]
        prefix.commit(holes[:2], np.array(values[:2]))
        assert prefix.delta() == '7,"s":'
        prefix.commit(holes[2:], np.array(values[2:]))
        assert prefix.finish_reason == "stop"
        assert json.loads(prefix.text) == {"n": 7, "s": "x"}

    def test_allowed_tokens(self, vocab):
        layout = Layout(vocab, encode, 1, {"type": "object", "properties": {
            "n": {"type": "integer"}, "s": {"type": "string", "minLength": 1}}})
        logits = np.zeros((1, 40 + layout.length, len(CHARS) + 3), dtype=np.float32)
        layout.mask_logits(logits, 40)
        first_digit, string_start = sorted(layout.allowed)[0], [p for p in layout.allowed][-16]
        allowed = {CHARS[i] for i in np.flatnonzero(np.isfinite(logits[0, 40 + first_digit, :len(CHARS)]))}
        assert allowed == set("0123456789")
        allowed = {CHARS[i] for i in np.flatnonzero(np.isfinite(logits[0, 40 + string_start, :len(CHARS)]))}
        assert '"' not in allowed and "\\" not in allowed and "<eos>" not in allowed and "a" in allowed
        assert np.isneginf(logits[0, 40 + first_digit, len(CHARS):]).all()  # past the vocabulary
        assert np.isfinite(logits[0, :40]).all()  # the prompt is untouched

    def test_string_values_are_escaped(self, vocab):
        layout = Layout(vocab, encode, 1, {"type": "string", "maxLength": 2})
        template = layout.template(layout.length)
        prefix = TemplatePrefix(decode, layout, template, 1)
        prefix.commit(np.flatnonzero(template == 1), np.array(encode('"\\')))
        assert json.loads(prefix.text) == '"\\'

    @pytest.mark.parametrize("schema, words", [
        ({"type": "array"}, "array"),
        ({"type": "object", "properties": {"a": {"type": "string", "pattern": "x"}}}, "pattern"),
        ({"type": "boolean"}, "single token"),
        ({"enum": ["yes", "no"]}, "single token"),
        ({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["b"]}, "required"),
        ("object", "must be an object"),
    ])
    def test_refusals_name_the_problem(self, vocab, schema, words):
        with pytest.raises(unmask.ConfigError, match=words):
            Layout(vocab, encode, 1, schema)


class TestFields:
    def test_types(self):
        body = Fields({"a": 1, "b": True, "threshold": 1, "cache": "dual", "steps": None})
        assert body.take("a", float) == 1
        with pytest.raises(unmask.ConfigError, match="b: expected an integer"):
            body.take("b", int)
        assert body.settings() == {"threshold": 1, "cache": "dual", "steps": None}
        body.finish()

    def test_leftovers_are_refused(self):
        body = Fields({"x": 1})
        with pytest.raises(ApiError, match="unknown field"):
            body.finish()
        with pytest.raises(ApiError, match="JSON object"):
            Fields([1])

    def test_settings_exclude_model_facts(self):
        kinds = setting_kinds()
        assert "threshold" in kinds and "mask_id" not in kinds and "shift_logits" not in kinds  # facts: the package's
        assert kinds["threshold"] == (float, True) and kinds["gen_length"] == (int, False)

    def test_stops_and_messages(self):
        assert stop_list("x") == ["x"] and stop_list(None) == []
        with pytest.raises(unmask.ConfigError):
            stop_list([""])
        parts = [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]
        assert check_messages(parts)[0]["content"] == "ab"
        with pytest.raises(unmask.ConfigError, match="only text parts"):
            check_messages([{"role": "user", "content": [{"type": "image_url"}]}])


class TestTools:
    TOOLS = [Tool("set_timer"), Tool("get_weather")]

    def test_read_call(self):
        call = read_call('{"name":"set_timer","arguments":{"minutes":5}}', self.TOOLS)
        assert (call.name, call.arguments) == ("set_timer", {"minutes": 5}) and call.id.startswith("call_")
        assert read_call('{"name":"launch","arguments":{}}', self.TOOLS) is None
        assert read_call('{"name":"set_timer","arguments":{},"x":1}', self.TOOLS) is None
        assert read_call("42", self.TOOLS) is None

    def test_held_while_it_could_be_a_call(self):
        assert could_be_call("") and could_be_call('  {"na') and not could_be_call("42")

    def test_choice(self):
        assert forced_tool(self.TOOLS, "auto") is None
        assert forced_tool(self.TOOLS, {"type": "function", "function": {"name": "get_weather"}}).name == "get_weather"
        assert forced_tool(self.TOOLS[:1], "required").name == "set_timer"
        for bad in ("required", "always", {"type": "function", "function": {"name": "nope"}}):
            with pytest.raises(unmask.ConfigError):
                forced_tool(self.TOOLS, bad)

    def test_parse(self):
        assert parse_tools([{"type": "function", "function": {"name": "a"}}]) == [Tool("a")]
        for bad in ({}, [{"function": {}}], [{"type": "function", "function": {"name": "a"}}] * 2):
            with pytest.raises(unmask.ConfigError):
                parse_tools(bad)


class TestOptions:
    def test_loopback_and_warning(self):
        assert ServeOptions().loopback and ServeOptions(host="::1").loopback
        assert warn_if_exposed(ServeOptions()) is None
        assert "--api-key" in warn_if_exposed(ServeOptions(host="0.0.0.0"))
        assert "needs the API key" in warn_if_exposed(ServeOptions(host="0.0.0.0", api_key="k"))

    @pytest.mark.parametrize("bad", [{"port": 70000}, {"api_key": " "}, {"queue_limit": -1},
                                     {"max_body_bytes": 10}, {"tool_prompt": "always"},
                                     {"step_delay_seconds": -1}])
    def test_bad_values(self, bad):
        with pytest.raises(unmask.ConfigError):
            ServeOptions(**bad).validate()


class TestIsolation:
    def test_missing_extra_is_one_line(self):
        code = ("import sys; sys.modules['uvicorn'] = None\n"
                "try:\n import unmask.serve\nexcept ImportError as e: print(e)")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
        assert out.strip() == 'unmask serve needs its extra: pip install "unmask[serve]"'

    def test_nothing_else_imports_the_serve_package(self):
        root = Path(unmask.__file__).parent
        importers = [p.relative_to(root).as_posix() for p in root.rglob("*.py")
                     if "serve" not in p.relative_to(root).parts[0] and p.name != "cmd_serve.py"
                     and ("from .serve" in p.read_text() or "unmask.serve" in p.read_text()
                          or "from ..serve" in p.read_text())]
        assert importers == []

    def test_cli_help(self):
        from click.testing import CliRunner

        from unmask.cli import cli

        result = CliRunner().invoke(cli, ["serve", "--help"])
        assert result.exit_code == 0 and "--api-key" in result.output and "/v1/chat/completions" in result.output


class _Engine:
    """Stands in for the model's engine: every row strongly prefers the letter "a"."""

    def __init__(self, seed: int = 0):
        self.rng = np.random.default_rng(seed)

    def begin(self, *, batch, length, cache, max_window, max_rows):
        assert cache == "none"
        engine = self

        class Run:
            def forward(self, window, ids):
                rows = engine.rng.normal(size=(batch, len(window.logits_index), len(CHARS))).astype(np.float32)
                rows[..., ID["a"]] += 20
                return rows, 0.0
        return Run()


class TestConstrainedRun:
    @pytest.mark.parametrize("shift", [False, True])
    def test_holes_only_take_their_tokens(self, shift):
        from types import SimpleNamespace

        from unmask.serve.adapter import run_steps

        vocab = Vocabulary(decode, len(CHARS), {0, 1}, filler=0)
        layout = Layout(vocab, encode, 1, {"type": "object", "properties": {
            "n": {"type": "integer", "maximum": 999}, "s": {"type": "string", "maxLength": 4}}})
        config = unmask.GenerationConfig(gen_length=layout.length)
        template = layout.template(layout.length)
        prefix = TemplatePrefix(decode, layout, template, 1)
        facts = unmask.ModelFacts(mask_id=1, eos_id=0, shift_logits=shift)
        model = SimpleNamespace(engine=_Engine(), threads=1, facts=facts)
        run_steps(model, np.array(encode("ab"), dtype=np.int64), config,
                  lambda step: prefix.commit(step.positions, step.tokens), template=template,
                  mask_logits=layout.mask_logits)
        value = json.loads(prefix.text)
        holes = np.flatnonzero(template == 1)
        digits = [CHARS[t] for t in prefix.canvas[holes[:3]]]
        assert all(d.isdigit() or d == "<eos>" for d in digits) and digits[0].isdigit()
        assert value["s"] == "aaaa"  # the string hole takes what the model prefers
        assert isinstance(value["n"], int)


class TestPlanOnAPackageWithBlocks:
    """A toy package whose defaults are gen_length 8 in blocks of 4 with 4 steps."""

    @pytest.fixture(scope="class")
    def toy(self, tmp_path_factory):
        from test_runtime_model import _write_toy

        return unmask.load(_write_toy(tmp_path_factory.mktemp("toy") / "pkg"), device="cpu", threads=1)

    def run(self, toy, request):
        from unmask.serve import adapter
        from unmask.serve.answer import Answer, generate, plan
        from unmask.serve.structured import Vocabulary

        facts = adapter.model_facts(toy)
        vocab = Vocabulary(facts.decode, facts.vocab_size, set(facts.special_ids), filler=facts.stop_ids[0])
        planned = plan(toy, facts, lambda: vocab, request, tool_prompt=False)
        events = []
        outcome = generate(toy, planned, Answer(facts, planned, lambda *e: events.append(e), 0.0), lambda: False, 0)
        return planned, outcome, events

    def test_schema_length_rounds_up_to_whole_blocks(self, toy):
        from unmask.serve.fields import GenerationRequest

        request = GenerationRequest(prompt="hi", response="json_schema", stream=True,
                                    schema={"type": "integer", "maximum": 99})
        planned, outcome, events = self.run(toy, request)
        assert (planned.config.gen_length, planned.config.block_length, planned.config.resolved_steps) == (4, 4, 4)
        assert planned.template.tolist()[2:] == [toy.manifest.special_ids.eos_id] * 2
        assert 0 <= json.loads(outcome.text) <= 99
        assert "".join(text for kind, text in events if kind == "delta") == outcome.text

    def test_max_tokens_rounds_up_and_cuts(self, toy):
        from unmask.serve.fields import GenerationRequest

        request = GenerationRequest(prompt="hi", max_tokens=5, overrides={"early_stop": False})
        planned, outcome, _ = self.run(toy, request)
        assert (planned.config.gen_length, planned.config.resolved_steps) == (8, 8)
        assert outcome.completion_tokens <= 5
        planned, _, _ = self.run(toy, GenerationRequest(prompt="hi", max_tokens=10, overrides={"block_length": 5}))
        assert (planned.config.gen_length, planned.config.block_length) == (10, 5)  # not refused for the default 8


class TestEmbedding:
    def test_app_mounted_without_its_lifespan_still_serves(self):
        from starlette.testclient import TestClient

        from unmask.serve import create_app

        model = unmask.load()
        client = TestClient(create_app(model))  # no `with`: the lifespan (which starts the worker) never runs
        messages = [{"role": "user", "content": "What is 12 + 30?"}]
        response = client.post("/v1/chat/completions", json={"messages": messages})
        assert response.json()["choices"][0]["message"]["content"] == model.generate(messages=messages).text
