"""The CLI end to end on a real exported package: a tiny LLaDA checkpoint, exported fp32.

The chat test drives `python -m unmask chat` in a pseudo-terminal (pexpect): two
turns, /stats, /set steps 8, then Ctrl-D. Everything is sized to run in seconds.
"""

from __future__ import annotations

import json
import os
import sys

import pytest
from click.testing import CliRunner

from unmask.cli import cli

pexpect = pytest.importorskip("pexpect")

GEN = ["--gen-length", "8", "--block-length", "8", "--steps", "4"]  # the package defaults to block_length 32


@pytest.fixture(scope="session")
def package(tmp_path_factory):
    """A tiny LLaDA package (random weights, byte-level tokenizer), exported once per session."""
    from unmask.export import export_model
    from unmask.export.testing import make_llada_checkpoint

    root = tmp_path_factory.mktemp("cli-package")
    # room for a three-turn conversation: the byte-level tokenizer spends about one token per character
    checkpoint = make_llada_checkpoint(root / "hf", max_sequence_length=512)
    out = root / "pkg"
    export_model(checkpoint, out, precision="fp32", validate=False, quiet=True)
    return out


def invoke(args, input=None):
    return CliRunner().invoke(cli, args, input=input, catch_exceptions=False)


def spawn(*args):
    env = {**os.environ, "TERM": "dumb", "PYTHONUNBUFFERED": "1", "COLUMNS": "100"}
    return pexpect.spawn(sys.executable, ["-m", "unmask", *args], encoding="utf-8", timeout=90, env=env,
                         dimensions=(40, 100))


class TestOnPackage:
    def test_generate_json(self, package):
        result = invoke(["generate", str(package), "-p", "hello", *GEN, "--json", "--cache", "none"])
        assert result.exit_code == 0, result.output
        doc = json.loads(result.stdout)
        assert len(doc["token_ids"]) == 8
        assert doc["stats"]["nfe"] <= 4 and doc["config"]["cache"] == "none"

    def test_generate_same_seed_same_text(self, package):
        args = ["generate", str(package), "-p", "hello", *GEN, "--temperature", "1", "--seed", "3", "--json"]
        first, second = (json.loads(invoke(args).stdout)["token_ids"] for _ in range(2))
        assert first == second

    def test_info(self, package):
        result = invoke(["info", str(package), "--verify"])
        assert result.exit_code == 0, result.output
        assert "llada" in result.stdout and "sha256 verified" in result.stdout

    def test_bench_json(self, package, tmp_path):
        out = tmp_path / "bench"
        result = invoke(["bench", str(package), "--runs", "1", "--warmup", "0", "--cache", "none,dual",
                         "--threshold", "none", "--gen-length", "8", "--block-length", "4", "--steps", "4",
                         "--out", str(out), "--json"])
        assert result.exit_code == 0, result.output
        doc = json.loads(result.stdout)
        assert [(r["baseline"], r["prompt"]) for r in doc["rows"]] == [
            (True, 0), (True, 1), (False, 0), (False, 1), (False, 0), (False, 1)]
        assert doc["rows"][0]["nfe"] == 8 and doc["rows"][0]["tokens_per_forward"] == 1.0
        assert all(sum(r["steps"]["tokens"]) == r["tokens"] <= 8 for r in doc["rows"])
        assert (out / "bench.json").is_file() and (out / "bench.md").is_file() and (out / "bench.svg").is_file()

    def test_broken_graph_named(self, package, tmp_path, capsys):
        import shutil

        from unmask.cli import main

        broken = tmp_path / "broken"
        shutil.copytree(package, broken)
        graph = broken / "model.onnx"
        data = bytearray(graph.read_bytes())
        data[-1] ^= 0xFF  # same length, different bytes: only the sha256 can tell
        graph.write_bytes(bytes(data))
        code = main(["generate", str(broken), "-p", "hi"])
        err = capsys.readouterr().err
        assert code == 1 and "model.onnx" in err and "sha256" in err and "Traceback" not in err
        assert err.count("\n") == 1


class TestTerminal:
    def test_chat_two_turns_stats_set_and_ctrl_d(self, package):
        child = spawn("chat", str(package), *GEN)
        try:
            child.expect_exact(">>> ")
            child.sendline("hello there")
            child.expect_exact(">>> ")
            child.sendline("and again")
            child.expect_exact(">>> ")
            child.sendline("/stats")
            child.expect(r"NFE (\d+), tokens per forward ([\d.]+)")
            assert int(child.match.group(1)) <= 4
            child.expect_exact(">>> ")
            child.sendline("/set steps 8")
            child.expect_exact("steps = 8")
            child.expect_exact(">>> ")
            child.sendline("third turn")
            child.expect_exact(">>> ")
            child.sendline("/stats")
            child.expect(r"NFE (\d+)")
            assert 4 < int(child.match.group(1)) <= 8
            child.expect_exact(">>> ")
            child.sendeof()
            child.expect(pexpect.EOF)
        finally:
            child.close()
        assert child.exitstatus == 0
        assert "Traceback" not in (child.before or "")

    def test_visual_redraws_in_a_terminal(self, package):
        child = spawn("generate", str(package), "-p", "hi", "--gen-length", "8", "--block-length", "4", "--steps", "8", "--visual")
        try:
            child.expect(pexpect.EOF)
            output = child.before
        finally:
            child.close()
        assert child.exitstatus == 0, output
        assert "░" in output and "tokens unmasked" in output
        assert "\x1b[J" in output  # redrawn in place


class TestEmbeddedModel:
    """Commands whose MODEL/PACKAGE argument is omitted use the model shipped in the package."""

    def test_info_without_argument_describes_the_embedded_model(self):
        from unmask.model import default_package_dir

        result = invoke(["info", "--json"])
        assert result.exit_code == 0, result.output
        doc = json.loads(result.output)
        assert doc["path"] == str(default_package_dir())
        assert doc["architecture"] == "llada" and doc["precision"] == "int8"
