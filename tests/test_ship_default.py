"""training/ship_default.py: a trained checkpoint becomes an embedded-model package, or nothing changes."""

import json

import pytest

import unmask
from unmask import tasks
from unmask.evaluate import TaskSpec, read_task_spec
from unmask.manifest import read_manifest
from training.ship_default import SHIPPED_SOURCE, choose_decoding, main, ship
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
    return ship(checkpoint, tmp_path_factory.mktemp("shipped") / "default", check=5, min_accuracy=0.0,
                decoding_examples=0, quiet=True)


def staging_leftovers(folder):
    return sorted(p.name for p in folder.parent.iterdir() if p.name.startswith(f".{folder.name}."))


class TestShip:
    def test_package_runs_the_tasks_generation_length_in_one_block(self, shipped, checkpoint):
        manifest = read_manifest(shipped)
        assert manifest.precision == "int8"
        assert manifest.generation == {"gen_length": tasks.GEN_LENGTH}  # block_length unset: one block
        assert manifest.provenance["shipped_as"] == "default" and manifest.provenance["source"] == SHIPPED_SOURCE
        assert read_task_spec(shipped) == TaskSpec(tasks.FAMILIES, tasks.GEN_LENGTH)
        result = unmask.load(shipped, threads=1).generate("What is 2 + 3?")
        assert result.stats.nfe >= 1 and result.stats.tokens <= tasks.GEN_LENGTH
        assert staging_leftovers(shipped) == []

    def test_shipping_again_replaces_the_package_whole(self, checkpoint, tmp_path):
        out = tmp_path / "default"
        out.mkdir()
        (out / "stale.txt").write_text("from an earlier model")
        ship(checkpoint, out, check=0, decoding_examples=0, quiet=True)
        assert not (out / "stale.txt").exists() and (out / "unmask.json").is_file()
        assert staging_leftovers(out) == []

    @pytest.mark.parametrize("limits, message", [
        (dict(max_bytes=1000, check=0), "budget"),
        (dict(check=3, min_accuracy=1.01), "held-out"),  # no model answers more than all of them
    ])
    def test_a_refused_checkpoint_leaves_the_previous_package(self, checkpoint, tmp_path, limits, message):
        out = tmp_path / "default"
        ship(checkpoint, out, check=0, decoding_examples=0, quiet=True)
        before = {p.name: p.read_bytes() for p in out.iterdir()}
        with pytest.raises(unmask.ModelFormatError, match=message):
            ship(checkpoint, out, quiet=True, decoding_examples=0, **limits)
        assert {p.name: p.read_bytes() for p in out.iterdir()} == before
        assert staging_leftovers(out) == []


class FakeMeasure:
    """Accuracy per threshold and speed per cache, as `measure` reports them; records each call."""

    def __init__(self, accuracy, speed, cache_accuracy=None):
        self.accuracy, self.speed, self.cache_accuracy, self.calls = accuracy, speed, cache_accuracy or {}, []

    def __call__(self, package, examples, sets, **settings):
        self.calls.append(settings)
        threshold, cache = settings["threshold"], settings["cache"]
        accuracy = self.cache_accuracy.get(cache, self.accuracy[threshold])
        per_set = accuracy if isinstance(accuracy, dict) else {name: accuracy for name in sets}
        return {**settings, "accuracy": sum(per_set.values()) / len(per_set), "sets": per_set,
                "tokens_per_forward": 1.0, "tokens_per_second": self.speed[cache]}


class TestChooseDecoding:
    SPEED = {"none": 100.0, "prefix": 150.0, "dual": 200.0}

    def test_lowest_threshold_within_one_point_then_the_fastest_cache(self):
        fake = FakeMeasure({None: 0.90, 0.9: 0.91, 0.8: 0.892, 0.7: 0.88}, self.SPEED)
        defaults, record = choose_decoding("pkg", measure=fake)
        assert defaults == {"threshold": 0.8, "cache": "dual"}  # 0.7 loses 2 points: the search stops there
        assert fake.calls[:4] == [{"threshold": t, "cache": "none"} for t in (None, 0.9, 0.8, 0.7)]
        assert [c["cache"] for c in fake.calls[4:]] == ["dual", "prefix", "none"]
        assert record["chosen"] == defaults and len(record["runs"]) == 7 and record["tolerance"] == 0.01

    def test_no_threshold_when_the_first_one_loses_accuracy(self):
        fake = FakeMeasure({None: 0.95, 0.9: 0.93, 0.8: 0.99, 0.7: 0.99}, self.SPEED)
        defaults, _ = choose_decoding("pkg", measure=fake)
        assert defaults == {"threshold": None, "cache": "dual"}
        assert {"threshold": 0.8, "cache": "none"} not in fake.calls  # stopped at the first loss

    def test_a_cache_that_loses_accuracy_is_not_chosen_however_fast(self):
        fake = FakeMeasure({None: 0.9, 0.9: 0.9, 0.8: 0.9, 0.7: 0.9}, self.SPEED, cache_accuracy={"dual": 0.5})
        defaults, _ = choose_decoding("pkg", measure=fake)
        assert defaults == {"threshold": 0.7, "cache": "prefix"}

    def test_a_cache_within_timing_noise_does_not_displace_the_preferred_one(self):
        fake = FakeMeasure({None: 0.9, 0.9: 0.9, 0.8: 0.9, 0.7: 0.9}, {"dual": 200.0, "prefix": 205.0, "none": 100.0})
        assert choose_decoding("pkg", measure=fake)[0]["cache"] == "dual"

    def test_every_set_must_keep_its_accuracy(self):
        """A loss on one set is not averaged away by another set where nothing is right anyway."""
        fake = FakeMeasure({None: {"split": 0.96, "phrasing": 0.04}, 0.9: {"split": 0.96, "phrasing": 0.04},
                            0.8: {"split": 0.94, "phrasing": 0.05}, 0.7: {"split": 0.9, "phrasing": 0.1}}, self.SPEED)
        defaults, _ = choose_decoding("pkg", measure=fake)
        assert defaults == {"threshold": 0.9, "cache": "dual"}

    def test_shipping_measures_and_stores_the_choice(self, checkpoint, tmp_path):
        out = ship(checkpoint, tmp_path / "default", check=0, decoding_examples=2, quiet=True)
        manifest = read_manifest(out)
        record = manifest.provenance["decoding_check"]
        assert record["examples_per_set"] == 2 and record["sets"] == ["split", "phrasing"]
        runs = record["runs"]
        assert runs[0]["threshold"] is None and runs[0]["cache"] == "none" and runs[0]["tokens_per_forward"] == 1.0
        chosen = record["chosen"]
        assert manifest.generation == {"gen_length": tasks.GEN_LENGTH, **{k: v for k, v in chosen.items() if v}}
        assert unmask.load(out, threads=1).resolve_config().threshold == chosen["threshold"]


    def test_decoding_only_rewrites_the_defaults_of_a_shipped_package(self, checkpoint, tmp_path, monkeypatch):
        out = ship(checkpoint, tmp_path / "default", check=0, decoding_examples=0, quiet=True)
        graph = (out / "model.onnx").read_bytes()
        monkeypatch.chdir(tmp_path)  # outside a checkout: --decoding-only writes nothing to the default --out
        assert main([str(out), "--decoding-only", "--decoding-examples", "1", "--quiet"]) == 0
        manifest = read_manifest(out)
        assert manifest.provenance["decoding_check"]["examples_per_set"] == 1
        assert manifest.generation["gen_length"] == tasks.GEN_LENGTH and "cache" in manifest.generation
        assert (out / "model.onnx").read_bytes() == graph and staging_leftovers(out) == []
        unmask.load(out, threads=1)  # the package still verifies


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
        assert main([str(checkpoint), "--out", str(out), "--check", "0", "--decoding-examples", "0", "--quiet"]) == 0
        assert json.loads((out / "tasks.json").read_text())["gen_length"] == tasks.GEN_LENGTH
