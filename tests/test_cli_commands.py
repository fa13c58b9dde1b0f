"""generate / chat / bench / info through click's CliRunner, on a scripted stand-in model.

The stand-in is an unmask.Model with a scripted stream (test_stand_in_matches_a_loaded_model
checks it has a loaded Model's attributes) and commits gen_length/steps positions per step,
left to right, so every count below is exact. End-to-end runs on an exported
package are in test_cli_package.py.
"""

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from click.testing import CliRunner

import unmask
from unmask import GenerationConfig
from unmask.cli import cli
from unmask.manifest import Dims, GraphFiles, Manifest, SpecialIds, write_manifest
from unmask.model import Model, Result, StreamEvent
from unmask.package import Package
from unmask.stats import GenerationStats

PROMPT_LENGTH = 4
EOS = 27


class LetterTokenizer:
    """id i -> letter i (a..z); 26 = space; EOS and above decode to nothing."""

    def decode(self, ids, skip_special_tokens=True):
        return "".join("abcdefghijklmnopqrstuvwxyz "[i] if i <= 26 else "" for i in map(int, ids))

    def encode(self, text, add_special_tokens=False):
        return [min(ord(c) - 97, 26) if c.isalpha() else 26 for c in text.lower()]


def make_manifest(**generation):
    return Manifest(
        architecture="llada",
        dims=Dims(vocab_size=32, hidden_size=8, num_layers=1, num_heads=2, num_kv_heads=2, head_dim=4,
                  max_sequence_length=256),
        special_ids=SpecialIds(mask_id=31, eos_id=EOS, eot_id=28),
        precision="fp32",
        target="cpu",
        graph=GraphFiles("model.onnx", {"model.onnx": "0" * 64}),
        size_bytes=1234,
        generation=generation,
        chat_template="{% for m in messages %}{{ m.content }}{% endfor %}",
    )


class ScriptedModel(Model):
    """A real unmask.Model (settings, chat sessions, labels are the real code) whose graph and
    decoder are replaced by a script: the same attributes as a loaded Model, no session."""

    def __init__(self, folder, **generation):  # Model.__init__ would open an ONNX session
        self.manifest = make_manifest(**generation)
        folder = Path(folder)
        self.package = Package(folder, self.manifest, folder / "model.onnx", folder / "tokenizer.json")
        self.placement = None
        self.threads = 2
        self.device = "cpu"
        self.tokenizer = LetterTokenizer()
        self.chat_template = object()
        self.engine = SimpleNamespace(session=SimpleNamespace(get_providers=lambda: ["CPUExecutionProvider"]))
        self.facts = self.manifest.model_facts()
        self.cache_reuse = True
        self._stop_ids = {EOS}
        self.calls = []

    def encode_prompt(self, prompt=None, *, messages=None, prompt_ids=None):
        return np.zeros(PROMPT_LENGTH, dtype=np.int64)

    def stream(self, prompt=None, *, messages=None, prompt_ids=None, config=None, **overrides):
        cfg = self.resolve_config(config, **overrides)
        self.calls.append({"prompt": prompt, "messages": messages, "prompt_ids": prompt_ids, "config": cfg})
        return self._events(cfg)

    def _events(self, cfg):
        length, steps = cfg.gen_length, cfg.resolved_steps
        answer = np.arange(length, dtype=np.int64) % 26
        per_step = length // steps
        block = cfg.resolved_block_length
        stats = GenerationStats(cache=cfg.cache)
        shown = 0
        for step in range(steps):
            positions = np.arange(step * per_step, (step + 1) * per_step)
            stats.nfe += 1  # filled by hand: record_step's signature is the runtime's business
            stats.tokens += len(positions)
            stats.forward_seconds.append(0.001)
            stats.host_seconds.append(0.0005)
            end = (step + 1) * per_step
            block_done = end % block == 0
            text = ""
            if block_done:
                stats.first_block_seconds = stats.first_block_seconds or 0.002
                text = self.tokenizer.decode(answer[shown:end])
                shown = end
            result = None
            if step == steps - 1:
                stats.total_seconds = 0.0015 * steps
                stats.peak_rss_bytes = 10 << 20
                result = Result(self.tokenizer.decode(answer), answer, np.zeros(PROMPT_LENGTH, np.int64), stats, cfg)
            yield StreamEvent(step, (end - 1) // block, positions + PROMPT_LENGTH, answer[positions], block_done,
                              result is not None, text, result, gen_start=PROMPT_LENGTH)


@pytest.fixture
def scripted(monkeypatch, tmp_path):
    """Every command's model load returns one ScriptedModel (a folder with an unmask.json exists)."""
    folder = tmp_path / "pkg"
    folder.mkdir()
    (folder / "unmask.json").write_text("{}")
    model = ScriptedModel(folder, seed=7)

    def load(path=None, device="auto", threads=None):
        model.loaded_with = (path, device, threads)
        return model

    monkeypatch.setattr(unmask.model, "load", load)
    return model


def invoke(args, input=None):
    return CliRunner().invoke(cli, args, input=input, catch_exceptions=False)


def run_main(args, capsys, input_text=None):
    """The console entry point, as a user's shell sees it (errors -> one line, exit code)."""
    from unmask.cli import main

    code = main(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_stand_in_matches_a_loaded_model(tmp_path):
    """ScriptedModel has every attribute a loaded Model has, of the same types where it matters."""
    real = unmask.load(threads=1)
    stand_in = ScriptedModel(tmp_path)
    assert set(vars(real)) <= set(vars(stand_in))
    for name in ("manifest", "package", "facts", "threads", "device", "cache_reuse"):
        assert type(getattr(stand_in, name)) is type(getattr(real, name)), name
    assert stand_in.engine.session.get_providers() == real.engine.session.get_providers()


class TestGenerate:
    def test_plain(self, scripted):
        result = invoke(["generate", str(scripted.package.folder), "-p", "hi", "--gen-length", "8", "--steps", "4"])
        assert result.exit_code == 0, result.output
        assert result.stdout == "abcdefgh\n"
        assert scripted.calls[-1]["config"].gen_length == 8
        assert scripted.calls[-1]["prompt"] == "hi"

    def test_embedded_model_when_no_path(self, scripted):
        result = invoke(["generate", "-p", "hi", "--gen-length", "8", "--steps", "8", "--threads", "3"])
        assert result.exit_code == 0, result.output
        assert scripted.loaded_with == (None, "auto", 3)

    def test_json(self, scripted):
        result = invoke(["generate", "-p", "hi", "--gen-length", "8", "--steps", "4", "--json"])
        doc = json.loads(result.stdout)
        assert doc["text"] == "abcdefgh"
        assert doc["token_ids"] == list(range(8))
        assert doc["stats"]["nfe"] == 4 and doc["stats"]["tokens_per_forward"] == 2
        assert doc["config"]["steps"] == 4 and doc["device"]["provider"] == "CPUExecutionProvider"

    def test_stream_prints_blocks(self, scripted):
        result = invoke(["generate", "-p", "hi", "--gen-length", "8", "--steps", "8", "--block-length", "4",
                         "--stream"])
        assert result.stdout == "abcdefgh\n"

    def test_visual_off_a_terminal_streams_plainly(self, scripted):
        result = invoke(["generate", "-p", "hi", "--gen-length", "8", "--steps", "8", "--block-length", "4",
                         "--visual"])
        assert result.exit_code == 0
        assert result.stdout == "abcdefgh\n"
        assert "\x1b" not in result.stdout
        assert "--visual needs a terminal" in result.stderr

    def test_file_and_stdin(self, scripted, tmp_path):
        prompt = tmp_path / "p.txt"
        prompt.write_text("from a file")
        assert invoke(["generate", "--file", str(prompt), "--gen-length", "4"]).exit_code == 0
        assert scripted.calls[-1]["prompt"] == "from a file"
        assert invoke(["generate", "--file", "-", "--gen-length", "4"], input="piped").exit_code == 0
        assert scripted.calls[-1]["prompt"] == "piped"

    def test_system_uses_messages(self, scripted):
        invoke(["generate", "-p", "hi", "--system", "be brief", "--gen-length", "4"])
        assert scripted.calls[-1]["messages"][0] == {"role": "system", "content": "be brief"}

    def test_verbose_prints_resolved_settings(self, scripted):
        result = invoke(["generate", "-p", "hi", "--gen-length", "8", "-v"])
        assert "gen_length" in result.stderr and "[flag]" in result.stderr
        seed = [line for line in result.stderr.splitlines() if line.split()[:1] == ["seed"]]
        assert seed[0].split()[1:] == ["7", "[package]"]
        assert result.stdout == "abcdefgh\n"

    def test_clearing_a_package_default(self, scripted):
        scripted.manifest.generation["threshold"] = 0.9
        invoke(["generate", "-p", "hi", "--gen-length", "8"])
        assert scripted.calls[-1]["config"].threshold == 0.9
        invoke(["generate", "-p", "hi", "--gen-length", "8", "--threshold", "none"])
        assert scripted.calls[-1]["config"].threshold is None

    def test_ineffective_flag_is_reported(self, scripted):
        result = invoke(["generate", "-p", "hi", "--gen-length", "8", "--steps", "8", "--top-k", "5"])
        assert result.exit_code == 0
        assert "--top-k has no effect" in result.stderr

    @pytest.mark.parametrize(
        "args, message",
        [
            (["-p", "a", "--file", "x"], "exactly one of"),
            ([], "exactly one of"),
            (["-p", "a", "--json", "--stream"], "--json"),
            (["-p", "a", "--algorithm", "best"], "low_confidence, random, origin"),
            (["-p", "a", "--cache", "all"], "none, prefix, dual"),
        ],
    )
    def test_usage_errors(self, scripted, args, message):
        result = CliRunner().invoke(cli, ["generate", *args])
        assert result.exit_code == 2
        assert message in result.output

    def test_contradiction_is_one_line(self, scripted, capsys):
        code, out, err = run_main(["generate", "-p", "a", "--threshold", "0.9", "--factor", "1"], capsys)
        assert code == 1
        assert err.startswith("error: threshold and factor") and err.count("\n") == 1
        assert "Traceback" not in err

    def test_missing_model_suggests_export(self, capsys, tmp_path):
        code, out, err = run_main(["generate", str(tmp_path / "nope"), "-p", "a"], capsys)
        assert code == 1 and "unmask export" in err and "Traceback" not in err

    def test_debug_shows_traceback(self, tmp_path):
        with pytest.raises(unmask.ModelFormatError):
            from unmask.cli import main

            main(["--debug", "generate", str(tmp_path / "nope"), "-p", "a"])


class TestChat:
    def test_piped_turns_and_commands(self, scripted, tmp_path):
        save = tmp_path / "conv.json"
        lines = ["hello", "/stats", "/set steps 4", "/set gen_length 4", "second", "/system be brief",
                 f"/save {save}", "/exit", "never sent"]
        result = invoke(["chat", "--gen-length", "8", "--steps", "8"], input="\n".join(lines) + "\n")
        assert result.exit_code == 0, result.output
        assert result.stdout == "abcdefgh\nabcd\n"
        assert "NFE 8, tokens per forward 1.00" in result.stderr
        assert "steps = 4" in result.stderr
        assert scripted.calls[-1]["config"].steps == 4
        doc = json.loads(save.read_text())
        assert doc["system"] == "be brief"
        assert [m["role"] for m in doc["messages"]] == ["user", "assistant"] * 2
        assert doc["messages"][3]["content"] == "abcd"
        assert doc["settings"] == {"gen_length": 4, "steps": 4}
        assert len(scripted.calls) == 2

    def test_bad_set_keeps_session(self, scripted):
        lines = ["/set steps 0", "/set nope 1", "/set algorithm best", "/set steps", "/frobnicate", "hi"]
        result = invoke(["chat", "--gen-length", "8", "--steps", "8"], input="\n".join(lines) + "\n")
        assert result.exit_code == 0
        assert "error: steps must be >= 1" in result.stderr
        assert "valid settings: gen_length" in result.stderr
        assert "low_confidence" in result.stderr
        assert "usage: /set KEY VALUE" in result.stderr
        assert "unknown command /frobnicate" in result.stderr
        assert result.stdout == "abcdefgh\n"
        assert scripted.calls[-1]["config"].steps == 8

    def test_reset_clears_history(self, scripted):
        result = invoke(["chat", "--gen-length", "4"], input="a\n/reset\nb\n")
        assert "conversation cleared" in result.stderr
        messages = scripted.calls[-1]["messages"]
        assert messages == [{"role": "user", "content": "b"}]

    def test_visual_on_pipe_degrades(self, scripted):
        result = invoke(["chat", "--gen-length", "8", "--block-length", "4", "--steps", "8", "--visual"],
                        input="hi\n")
        assert result.stdout == "abcdefgh\n" and "\x1b" not in result.stdout

    def test_no_stream(self, scripted):
        result = invoke(["chat", "--gen-length", "4", "--no-stream"], input="hi\n")
        assert result.stdout == "abcd\n"

    def test_eof_exits_cleanly(self, scripted):
        assert invoke(["chat"], input="").exit_code == 0

    def test_cancel_drops_the_turn(self, scripted):
        from unmask.cli.render import BlockView
        from unmask.cli.repl import ChatLoop

        class Interrupting(BlockView):
            def event(self, ev):
                raise KeyboardInterrupt

        import io

        err = io.StringIO()
        session = scripted.chat()
        loop = ChatLoop(scripted, session, {"gen_length": 4}, view=Interrupting(io.StringIO()), out=io.StringIO(),
                        err=err)
        loop.run(["hi", "/stats"])
        assert session.history == []
        assert "cancelled" in err.getvalue() and "no answer yet" in err.getvalue()


class TestCanvas:
    def test_render_masks_and_runs(self):
        import io

        from unmask.cli.render import CanvasView

        view = CanvasView(io.StringIO(), LetterTokenizer().decode)
        view.start(GenerationConfig(gen_length=6, steps=3))
        view.event(SimpleNamespace(step=0, gen_start=10, positions=[10, 13], tokens=[0, 3]))
        assert view.render().splitlines() == ["step 1/3  2/6 tokens unmasked", "a░░d░░"]
        view.finish("done")
        assert view.out.getvalue().endswith("done\n\x1b[?25h")


class TestBench:
    def test_json_schema(self, scripted, tmp_path):
        out = tmp_path / "b"
        result = invoke(["bench", "--runs", "2", "--warmup", "0", "--cache", "none,dual", "--threshold", "none",
                         "--gen-length", "8", "--steps", "4", "--out", str(out), "--json"])
        assert result.exit_code == 0, result.output
        doc = json.loads(result.stdout)
        assert doc["schema"] == "unmask.bench/1"
        assert set(doc) >= {"model", "device", "settings", "rows", "unmask_version", "created"}
        assert doc["device"]["provider"] == "CPUExecutionProvider" and doc["device"]["threads"] == 2
        assert doc["settings"] == {"runs": 2, "warmup": 0, "prompts": 2, "statistic": "median"}
        assert [(r["name"].split()[0], r["prompt"]) for r in doc["rows"]] == [
            ("baseline", 0), ("baseline", 1), ("cache=none", 0), ("cache=none", 1),
            ("cache=dual", 0), ("cache=dual", 1)]
        for row in doc["rows"]:
            assert set(row) >= {"nfe", "tokens", "tokens_per_forward", "tokens_per_second", "time_to_first_block",
                                "forward_seconds_per_step", "host_seconds_per_step", "peak_rss", "speedup",
                                "nfe_reduction", "config", "steps", "prompt", "prompt_text"}
            assert row["nfe"] * row["tokens_per_forward"] == row["tokens"] == 8
        assert doc["rows"][0]["nfe"] == 8 and doc["rows"][2]["nfe"] == 4
        assert doc["rows"][2]["nfe_reduction"] == 2.0
        assert doc["rows"][2]["steps"]["tokens"] == [2, 2, 2, 2]
        assert {p.name for p in out.iterdir()} >= {"bench.json", "bench.md"}
        assert json.loads((out / "bench.json").read_text())["rows"] == doc["rows"]

    def test_default_run_table_on_stdout(self, scripted, tmp_path, capsys):
        """No --threshold: the package's settings and threshold 0.9 beside the baseline, one row per prompt."""
        code, out, err = run_main(["bench", "--runs", "1", "--warmup", "0", "--gen-length", "8",
                                   "--out", str(tmp_path / "b")], capsys)
        assert code == 0, err
        lines = out.splitlines()
        assert lines[0].startswith("prompt 1: ") and lines[1].startswith("prompt 2: ")
        assert lines[2].split()[:4] == ["setting", "prompt", "NFE", "tokens"]
        settings = [line.split("  ")[0] for line in lines[3:]]
        assert settings == ["baseline (1 token/forward) L=8"] * 2 + ["cache=dual steps=8 L=8"] * 2 + \
            ["cache=dual threshold=0.9 L=8"] * 2
        assert "wrote" in err and "bench.svg" in err

    def test_existing_out_refused_before_any_run(self, scripted, tmp_path, capsys):
        (tmp_path / "b").mkdir()
        code, out, err = run_main(["bench", "--out", str(tmp_path / "b")], capsys)
        assert code == 1 and err.strip().count("\n") == 0 and "--force" in err
        assert scripted.calls == [] and not any((tmp_path / "b").iterdir())
        code, out, err = run_main(["bench", "--runs", "1", "--warmup", "0", "--gen-length", "8", "--force",
                                   "--out", str(tmp_path / "b")], capsys)
        assert code == 0 and (tmp_path / "b" / "bench.json").is_file()

    def test_unwritable_out_refused_before_any_run(self, scripted, capsys):
        code, out, err = run_main(["bench", "--out", "/proc/nope"], capsys)
        assert code == 1 and err.startswith("error: cannot write bench results to /proc/nope")
        assert scripted.calls == []

    def test_bad_list_names_choices(self, scripted):
        result = CliRunner().invoke(cli, ["bench", "--cache", "none,fast"])
        assert result.exit_code == 2 and "none, prefix, dual" in result.output

    def test_prompts_file(self, scripted, tmp_path):
        prompts = tmp_path / "p.txt"
        prompts.write_text("one\ntwo\nthree\n")
        result = invoke(["bench", "--prompts", str(prompts), "--runs", "1", "--warmup", "0", "--gen-length", "4",
                         "--out", str(tmp_path / "o"), "--json"])
        assert json.loads(result.stdout)["settings"]["prompts"] == 3


class TestInfo:
    @pytest.fixture
    def package(self, tmp_path):
        folder = tmp_path / "pkg"
        folder.mkdir()
        (folder / "model.onnx").write_bytes(b"\0" * 10)
        write_manifest(make_manifest(steps=16, threshold=0.9), folder)
        return folder

    def test_text(self, package):
        result = invoke(["info", str(package)])
        assert result.exit_code == 0, result.output
        assert "architecture   llada" in result.stdout
        assert "mask_id" not in result.stdout.split("default generation settings")[0]
        assert "mask 31" in result.stdout
        assert "threshold" in result.stdout and "[package]" in result.stdout

    def test_json(self, package):
        doc = json.loads(invoke(["info", str(package), "--json"]).stdout)
        assert doc["generation"]["steps"] == 16 and doc["package_defaults"] == {"steps": 16, "threshold": 0.9}
        assert doc["special_tokens"]["eos"]["id"] == EOS

    def test_broken_package_names_file(self, package, capsys):
        (package / "unmask.json").write_text('{"format_version": 1, "dims": 3}')
        code, out, err = run_main(["info", str(package)], capsys)
        assert code == 1 and "unmask.json" in err and "dims" in err and "Traceback" not in err

    def test_missing_graph(self, package, capsys):
        (package / "model.onnx").unlink()
        code, out, err = run_main(["info", str(package)], capsys)
        assert code == 1 and "model.onnx" in err


class TestRoot:
    def test_version(self):
        result = invoke(["--version"])
        assert result.stdout.strip() == f"unmask, version {unmask.__version__}"

    @pytest.mark.parametrize("name", ["chat", "generate", "bench", "info"])
    def test_help_ends_with_examples(self, name):
        result = invoke([name, "--help"])
        assert result.exit_code == 0
        head, _, examples = result.stdout.partition("Examples:")
        assert "Options:" in head  # the examples come last
        assert examples.strip().splitlines()[0].strip().startswith(f"unmask {name}")
