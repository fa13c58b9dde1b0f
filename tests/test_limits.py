"""unmask.limits and unmask.sandbox: hostile files and chat templates are refused with ModelFormatError.

Every hang below is guarded (templates stop at MAX_TEMPLATE_SECONDS, a FIFO is never opened
for a blocking read), so a regression fails by exception, never by hanging the suite.
"""

from __future__ import annotations

import json
import os

import pytest

from unmask import ConfigError, ModelFormatError
from unmask.chat import ChatTemplate
from unmask.limits import MAX_JSON_DEPTH, MAX_TOKEN_CHARS, json_depth, read_bounded
from unmask.manifest import read_json_object
from unmask.manifest import checked_tokenizer_json

from hostile_packages import TEMPLATE_DEEP, TEMPLATE_HUGE, TEMPLATE_LOOPS

MESSAGES = [{"role": "user", "content": "hi"}]


class TestFiles:
    @pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
    def test_fifo_is_refused_without_blocking(self, tmp_path):
        os.mkfifo(tmp_path / "pipe")
        with pytest.raises(ModelFormatError, match="not a regular file"):
            read_bounded(tmp_path / "pipe", 100, "graph")

    def test_size_limit(self, tmp_path):
        (tmp_path / "f").write_bytes(b"x" * 101)
        with pytest.raises(ModelFormatError, match="above the 100-byte limit"):
            read_bounded(tmp_path / "f", 100, "graph")
        assert read_bounded(tmp_path / "f", 101, "graph") == b"x" * 101

    @pytest.mark.parametrize("text, depth", [("{}", 1), ('{"a": [1, {"b": "]]]"}]}', 3),
                                             ('["\\"[[[", [[]]]', 3), ("1", 0)])
    def test_json_depth_ignores_strings(self, text, depth):
        assert json_depth(text) == depth

    def test_deep_json_is_refused_before_parsing(self, tmp_path):
        (tmp_path / "a.json").write_text("[" * 100_000 + "]" * 100_000)
        with pytest.raises(ModelFormatError, match="nested 100000 levels"):
            read_json_object(tmp_path / "a.json")
        (tmp_path / "b.json").write_text('{"a": ' + "[" * (MAX_JSON_DEPTH - 1) + "]" * (MAX_JSON_DEPTH - 1) + "}")
        assert "a" in read_json_object(tmp_path / "b.json")


class TestTokenizerJson:
    def _doc(self, **extra):
        return json.dumps({"added_tokens": [], "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, **extra})

    def test_long_added_token(self):
        token = {"id": 1, "content": "a" * (MAX_TOKEN_CHARS + 1), "special": True}
        with pytest.raises(ModelFormatError, match="token of"):
            checked_tokenizer_json(self._doc(added_tokens=[token]).encode(), "t")

    @pytest.mark.parametrize("model", [{"vocab": {"b" * (MAX_TOKEN_CHARS + 1): 0}},
                                       {"vocab": [["c" * (MAX_TOKEN_CHARS + 1), 0.0]]},
                                       {"vocab": {}, "merges": ["a " + "d" * (MAX_TOKEN_CHARS + 1)]}])
    def test_long_vocabulary_entry(self, model):
        with pytest.raises(ModelFormatError, match="token of"):
            checked_tokenizer_json(json.dumps({"model": model}).encode(), "t")

    def test_ordinary_document_passes(self):
        assert checked_tokenizer_json(self._doc().encode(), "t") == self._doc()


HOSTILE_TEMPLATES = {
    "loops": TEMPLATE_LOOPS,
    "deep blocks": TEMPLATE_DEEP,
    "repeat": TEMPLATE_HUGE,
    "deep brackets": "{{" + "(" * 5000 + "1" + ")" * 5000 + "}}",
    "output": "{% for i in range(100000) %}{% for j in range(100000) %}xxxxxxxx{% endfor %}{% endfor %}",
    "power": "{{ 2 ** 1000000 }}",
    "center": "{{ 'x'|center(1000000000) }}",
    "doubling ~": "{% set ns = namespace(s='x') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
    "doubling +": "{% set ns = namespace(s='x') %}{% for i in range(60) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
    "recursive macro": "{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}",
    "printf width": "{{ '%999999999d' % 1 }}",
    "format width": "{{ '{:>999999999}'.format(1) }}",
    "replace": "{% set s = 'a' * 90000 %}{{ s.replace('', s) }}",
    "indent": "{% set s = '\\n' * 90000 %}{{ s|indent(s) }}",
    "list repeat": "{% set s = ['a' * 90000] * 90000 %}{{ s|length }}",
    "join": "{% set s = 'a' * 90000 %}{{ [s, s, s, s, s, s, s, s]|join(s * 8) }}",
    "str.join": "{% set s = 'a' * 90000 %}{{ (s * 8).join([s, s, s, s, s, s, s, s]) }}",
    "too long": "x" * (300 * 1024),
}


class TestTemplates:
    @pytest.mark.parametrize("name", sorted(HOSTILE_TEMPLATES))
    def test_refused_at_load(self, name):
        with pytest.raises(ModelFormatError):
            ChatTemplate(HOSTILE_TEMPLATES[name])

    @pytest.mark.parametrize("template, trigger, error, match", [
        # a blow-up only some input reaches is refused when it is reached
        ("{% for m in messages %}{% if m['content'] == 'boom' %}{{ 'x' * 10000000 }}{% endif %}{% endfor %}ok",
         {"role": "user", "content": "boom"}, ModelFormatError, "limit"),
        # the template's own rule (raise_exception) stays a ConfigError
        ("{% if messages[0]['role'] == 'system' %}{{ raise_exception('no system') }}{% endif %}ok",
         {"role": "system", "content": "s"}, ConfigError, "no system"),
    ])
    def test_input_dependent_failure_at_render(self, template, trigger, error, match):
        template = ChatTemplate(template)
        assert template.render(MESSAGES) == "ok"
        with pytest.raises(error, match=match):
            template.render([trigger])

    def test_long_messages_fit_the_output_budget(self):
        content = "y" * (3 << 20)  # longer than the fixed allowance: the budget grows with the messages
        template = ChatTemplate("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] + '!' }}{% endfor %}")
        assert template.render([{"role": "user", "content": content}]) == f"<user>{content}!"

    def test_template_bug_is_typed(self):
        with pytest.raises(ModelFormatError, match="ZeroDivisionError"):
            ChatTemplate("{{ 1 // (messages|length - 4) }}")
