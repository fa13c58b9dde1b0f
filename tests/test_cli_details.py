"""chat and generate details (issue 34 item 6): refused settings, notes, progress, leaving, multi-line input.

Piped runs use test_cli_commands' scripted stand-in model; terminal behaviour runs
`python -m unmask chat` on the toy package of test_runtime_model in a pseudo-terminal.
"""

from __future__ import annotations

import json
import os
import sys

import pytest
from test_cli_commands import invoke, run_main, scripted  # noqa: F401  (the scripted model's fixture)
from test_runtime_model import _write_toy

from unmask.cli import main

try:
    import pexpect
except ImportError:  # the terminal tests need it; the rest do not
    pexpect = None

TOY = ["--gen-length", "8", "--block-length", "8", "--steps", "4"]  # one block of 8 tokens in 4 steps


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    return _write_toy(tmp_path_factory.mktemp("details") / "pkg")


class TestSettingsRefusedEarly:
    def test_set_gen_length_beyond_context(self, scripted):  # noqa: F811
        result = invoke(["chat", "--gen-length", "8", "--steps", "8"], input="/set gen_length 100000\nhi\n")
        assert result.exit_code == 0
        assert "error: gen_length 100000 leaves no room for a prompt in the model's context of 256 tokens" \
            in result.stderr
        assert result.stdout == "abcdefgh\n"  # the next turn runs with the old setting
        assert scripted.calls[-1]["config"].gen_length == 8

    def test_generate_flag_beyond_context(self, scripted, capsys):  # noqa: F811
        code, out, err = run_main(["generate", "-p", "hi", "--gen-length", "256"], capsys)
        assert code == 1 and err.startswith("error: gen_length 256 leaves no room") and err.count("\n") == 1
        assert scripted.calls == []  # refused before any generation

    @pytest.mark.parametrize("algorithm, rest", [("low_confidence", "the others still run a forward pass each"),
                                                 ("entropy", "the others are skipped")])
    def test_steps_beyond_gen_length_noted(self, scripted, algorithm, rest):  # noqa: F811
        result = invoke(["generate", "-p", "hi", "--gen-length", "4", "--steps", "8", "--algorithm", algorithm])
        assert result.exit_code == 0, result.output
        assert f"note: steps 8 is more than gen_length 4: at most 4 steps can commit a token; {rest}" \
            in result.stderr

    def test_lowering_gen_length_below_package_steps_noted(self, scripted):  # noqa: F811
        scripted.manifest.generation["steps"] = 8
        result = invoke(["generate", "-p", "hi", "--gen-length", "4"])
        assert "note: steps 8 is more than gen_length 4" in result.stderr

    def test_chat_set_steps_noted(self, scripted):  # noqa: F811
        result = invoke(["chat", "--gen-length", "8", "--steps", "8"], input="/set steps 16\n")
        assert "steps = 16" in result.stderr
        assert "note: steps 16 is more than gen_length 8: at most 8 steps can commit a token" in result.stderr

    def test_steps_within_gen_length_not_noted(self, scripted):  # noqa: F811
        result = invoke(["generate", "-p", "hi", "--gen-length", "8", "--steps", "8"])
        assert "note:" not in result.stderr


class TestJsonPerStep:
    def test_summary_by_default(self, scripted):  # noqa: F811
        stats = json.loads(invoke(["generate", "-p", "hi", "--gen-length", "8", "--steps", "4", "--json"]).stdout)["stats"]
        assert stats["nfe"] == 4 and "forward_seconds" not in stats and "step_kinds" not in stats

    def test_per_step_flag(self, scripted):  # noqa: F811
        args = ["generate", "-p", "hi", "--gen-length", "8", "--steps", "4", "--json", "--per-step"]
        stats = json.loads(invoke(args).stdout)["stats"]
        assert stats["forward_seconds"] == [0.001] * 4 and len(stats["host_seconds"]) == 4

    def test_per_step_needs_json(self, scripted, capsys):  # noqa: F811
        code, out, err = run_main(["generate", "-p", "hi", "--per-step"], capsys)
        assert code == 2 and "--per-step" in err


class TestMultiLine:
    def test_fenced_message_is_one_turn(self, scripted):  # noqa: F811
        lines = ['"""', "first line", "    indented", 'last"""', "/exit"]
        result = invoke(["chat", "--gen-length", "8", "--steps", "8"], input="\n".join(lines) + "\n")
        assert result.exit_code == 0 and result.stdout == "abcdefgh\n"
        assert len(scripted.calls) == 1
        assert scripted.calls[0]["messages"][-1]["content"] == "first line\n    indented\nlast"

    def test_fence_on_one_line_and_unclosed_at_end(self, scripted):  # noqa: F811
        result = invoke(["chat", "--gen-length", "8", "--steps", "8"], input='"""one line"""\n"""open\nstill\n')
        assert result.exit_code == 0
        assert [c["messages"][-1]["content"] for c in scripted.calls] == ["one line", "open\nstill"]


class TestCacheModeAgrees:
    def test_info_and_generate_verbose(self, toy, capsys):
        assert main(["info", str(toy)]) == 0
        info = [line.split() for line in capsys.readouterr().out.splitlines() if line.split()[:1] == ["cache"]]
        assert main(["generate", str(toy), "-p", "hi", "-v", "--device", "cpu"]) == 0
        verbose = [line.split() for line in capsys.readouterr().err.splitlines() if line.split()[:1] == ["cache"]]
        assert info == verbose == [["cache", "dual", "[default]"]]
        assert main(["info", str(toy), "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["generation"]["cache"] == "dual"


HINT = "(Ctrl-C again, Ctrl-D or /exit leaves)"


def converse(toy, steps) -> int:
    """`unmask chat TOY` in a pseudo-terminal, driven by (pexpect method, argument) steps; its exit status."""
    env = {**os.environ, "TERM": "dumb", "PYTHONUNBUFFERED": "1", "COLUMNS": "100"}
    child = pexpect.spawn(sys.executable, ["-m", "unmask", "chat", str(toy), *TOY, "--device", "cpu"],
                          encoding="utf-8", timeout=60, env=env, dimensions=(40, 100))
    try:
        for method, *argument in steps:
            getattr(child, method)(*argument)
        child.expect(pexpect.EOF)  # every conversation below ends by leaving
    finally:
        child.close()
    assert "Traceback" not in (child.before or "")
    return child.exitstatus


@pytest.mark.skipif(pexpect is None, reason="pexpect is not installed")
class TestTerminal:
    def test_banner_progress_and_ctrl_c_twice(self, toy):
        assert converse(toy, [
            ("expect_exact", "context 256 tokens; answers of 8 tokens in 4 steps (low_confidence); "
                             "chat template, key/value reuse (cache dual)"),
            ("expect_exact", '""" for a message of several lines; Ctrl-D or Ctrl-C twice leaves'),
            ("expect_exact", ">>> "),
            ("sendline", "hi"),
            ("expect", r"\[step 1/4, \d/8 tokens unmasked\]"),  # a one-block answer shows its progress
            ("expect_exact", ">>> "),
            ("sendintr",),
            ("expect_exact", HINT),
            ("expect_exact", ">>> "),
            ("sendintr",),  # the second Ctrl-C in a row leaves
        ]) == 0

    def test_typing_in_between_resets_ctrl_c(self, toy):
        assert converse(toy, [
            ("expect_exact", ">>> "),
            ("sendintr",),
            ("expect_exact", HINT),
            ("sendline", "/help"),
            ("expect_exact", "/reset"),
            ("expect_exact", ">>> "),
            ("sendintr",),
            ("expect_exact", HINT),  # a hint again, not an exit
            ("sendline", "/exit"),
        ]) == 0
