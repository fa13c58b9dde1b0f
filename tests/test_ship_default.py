"""training/ship_default.py: a trained checkpoint becomes an embedded-model package, or nothing changes."""

import json

import pytest

import unmask
from unmask import tasks
from unmask.evaluate import TaskSpec, read_task_spec
from unmask.manifest import read_manifest
from training.ship_default import main, ship
from training.train import TrainConfig, train

# Zero training steps: random weights in the real layout and tokenizer, which is all shipping reads.
UNTRAINED = dict(d_model=32, n_layers=1, n_heads=2, mlp_hidden_size=64, vocab_size=400, tokenizer_examples=500,
                 batch_size=4, max_steps=0, eval_per_family=1, final_eval_per_family=1, threads=1)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    out = tmp_path_factory.mktemp("ship") / "ckpt"
    train(TrainConfig(out=str(out), **UNTRAINED))
    return out


@pytest.fixture(scope="module")
def shipped(checkpoint, tmp_path_factory):
    return ship(checkpoint, tmp_path_factory.mktemp("shipped") / "default", check=5, min_accuracy=0.0, quiet=True)


def staging_leftovers(folder):
    return sorted(p.name for p in folder.parent.iterdir() if p.name.startswith(f".{folder.name}."))


class TestShip:
    def test_package_runs_the_tasks_generation_length_in_one_block(self, shipped, checkpoint):
        manifest = read_manifest(shipped)
        assert manifest.precision == "int8"
        assert manifest.generation == {"gen_length": tasks.GEN_LENGTH}  # block_length unset: one block
        assert manifest.provenance["shipped_as"] == "default" and manifest.provenance["source"] == checkpoint.name
        assert read_task_spec(shipped) == TaskSpec(tasks.FAMILIES, tasks.GEN_LENGTH)
        result = unmask.load(shipped, threads=1).generate("What is 2 + 3?")
        assert result.stats.nfe >= 1 and result.stats.tokens <= tasks.GEN_LENGTH
        assert staging_leftovers(shipped) == []

    def test_shipping_again_replaces_the_package_whole(self, checkpoint, tmp_path):
        out = tmp_path / "default"
        out.mkdir()
        (out / "stale.txt").write_text("from an earlier model")
        ship(checkpoint, out, check=0, quiet=True)
        assert not (out / "stale.txt").exists() and (out / "unmask.json").is_file()
        assert staging_leftovers(out) == []

    @pytest.mark.parametrize("limits, message", [
        (dict(max_bytes=1000, check=0), "budget"),
        (dict(check=3, min_accuracy=1.01), "held-out"),  # no model answers more than all of them
    ])
    def test_a_refused_checkpoint_leaves_the_previous_package(self, checkpoint, tmp_path, limits, message):
        out = tmp_path / "default"
        ship(checkpoint, out, check=0, quiet=True)
        before = {p.name: p.read_bytes() for p in out.iterdir()}
        with pytest.raises(unmask.ModelFormatError, match=message):
            ship(checkpoint, out, quiet=True, **limits)
        assert {p.name: p.read_bytes() for p in out.iterdir()} == before
        assert staging_leftovers(out) == []


class TestMain:
    def test_default_destination_needs_the_checkout_root(self, checkpoint, tmp_path, monkeypatch, capsys):
        monkeypatch.chdir(tmp_path)
        with pytest.raises(SystemExit) as exc:
            main([str(checkpoint)])
        assert exc.value.code == 2 and "not an unmask checkout" in capsys.readouterr().err

    def test_bad_checkpoint_is_one_error_line(self, tmp_path, capsys):
        assert main([str(tmp_path / "missing"), "--out", str(tmp_path / "out"), "--check", "0", "--quiet"]) == 1
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1
        assert not (tmp_path / "out").exists()

    def test_writes_where_told(self, checkpoint, tmp_path):
        out = tmp_path / "pkg"
        assert main([str(checkpoint), "--out", str(out), "--check", "0", "--quiet"]) == 0
        assert json.loads((out / "tasks.json").read_text())["gen_length"] == tasks.GEN_LENGTH
