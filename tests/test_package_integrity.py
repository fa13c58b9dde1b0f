"""Integrity: every package file is hashed, and the bytes hashed are the bytes that run.

Issue 35, item 1: (a) an external-data location that is not UTF-8 was checked under another
name; (b) tokenizer.json was never hashed; (c) a file swapped between the hash check and
ONNX Runtime opening it by path ran unverified.
"""

from __future__ import annotations

import hashlib
import json
import shutil

import numpy as np
import pytest

import unmask
from unmask import model as model_module
from unmask.cli import main
from unmask.export import export_model
from unmask.export.testing import make_llada_checkpoint
from unmask.model import default_package_dir
from unmask.package import external_data_locations, open_package, read_package

from hostile_packages import build, nested_subgraphs

PROMPT = np.array([3, 4, 5, 6], dtype=np.int64)
SETTINGS = dict(gen_length=8, block_length=8, steps=8, early_stop=False)


@pytest.fixture(scope="module")
def external_package(tmp_path_factory):
    """A tiny export whose weights live in model.onnx.data."""
    root = tmp_path_factory.mktemp("ext")
    out = root / "pkg"
    export_model(make_llada_checkpoint(root / "hf"), out, quiet=True, validate=False, external_data_threshold=0)
    return out


def _copy_default(tmp_path):
    return shutil.copytree(default_package_dir(), tmp_path / "pkg")


def _generate(folder) -> list[int]:
    model = unmask.load(folder, device="cpu", threads=1)
    return model.generate(prompt_ids=PROMPT, **SETTINGS).token_ids.tolist()


class TestLocations:
    def test_location_that_is_not_utf8_is_refused(self, tmp_path, capsys):
        folder = build("location_not_utf8", tmp_path / "pkg")
        with pytest.raises(unmask.ModelFormatError, match="UTF-8"):
            open_package(folder)
        assert main(["info", "--verify", str(folder)]) == 1
        assert "sha256 verified" not in capsys.readouterr().out

    def test_nesting_is_bounded(self):
        assert external_data_locations(nested_subgraphs(60)) == []
        with pytest.raises(unmask.ModelFormatError, match="nests subgraphs"):
            external_data_locations(nested_subgraphs(65))


class TestTokenizerHash:
    def test_export_records_it(self, external_package):
        raw = json.loads((external_package / "unmask.json").read_text())
        assert raw["tokenizer_sha256"] == hashlib.sha256((external_package / "tokenizer.json").read_bytes()).hexdigest()

    def test_changed_tokenizer_is_refused(self, tmp_path):
        folder = build("tokenizer_swapped", tmp_path / "pkg")
        with pytest.raises(unmask.ModelFormatError, match="sha256"):
            unmask.load(folder, device="cpu")

    def test_package_without_the_hash_says_re_export(self, tmp_path):
        folder = _copy_default(tmp_path)
        raw = json.loads((folder / "unmask.json").read_text())
        del raw["tokenizer_sha256"]
        (folder / "unmask.json").write_text(json.dumps(raw))
        with pytest.raises(unmask.ModelFormatError, match="unmask export"):
            unmask.load(folder, device="cpu")


class TestNoSwapWindow:
    """Files replaced after they were hashed (here: between the check and the session) change nothing."""

    def _swap_after_check(self, monkeypatch, swap):
        """Run `swap(folder)` after the package is read and hashed, just before ORT gets the graph."""
        read = model_module.read_package

        def read_then_swap(folder, manifest=None):
            checked = read(folder, manifest)
            swap(checked[0].folder)
            return checked

        monkeypatch.setattr(model_module, "read_package", read_then_swap)

    def test_graph_swapped(self, tmp_path, monkeypatch):
        folder = _copy_default(tmp_path)
        want = _generate(folder)
        self._swap_after_check(monkeypatch, lambda f: (f / "model.onnx").write_bytes(b"\x08" * 64))
        assert _generate(folder) == want

    def test_external_data_swapped(self, external_package, tmp_path, monkeypatch):
        folder = shutil.copytree(external_package, tmp_path / "pkg")
        want = _generate(folder)
        size = (folder / "model.onnx.data").stat().st_size
        self._swap_after_check(monkeypatch, lambda f: (f / "model.onnx.data").write_bytes(bytes(size)))
        assert _generate(folder) == want

    def test_tokenizer_swapped(self, tmp_path, monkeypatch):
        def vocabulary(folder):
            tok = unmask.load(folder, device="cpu", threads=1).tokenizer
            return [tok.id_to_token(i) for i in range(tok.vocab_size)]

        folder = _copy_default(tmp_path)
        want = vocabulary(folder)
        other = build("tokenizer_swapped", tmp_path / "other") / "tokenizer.json"
        self._swap_after_check(monkeypatch, lambda f: shutil.copyfile(other, f / "tokenizer.json"))
        assert vocabulary(folder) == want

    def test_only_listed_bytes_reach_ort(self, external_package):
        package, graph = read_package(external_package)
        assert set(graph.external) == {"model.onnx.data"}
        assert graph.model == (external_package / "model.onnx").read_bytes()
        assert package.tokenizer_json == (external_package / "tokenizer.json").read_text(encoding="utf-8")


class TestOrder:
    def test_memory_check_comes_before_reading_the_weights(self, tmp_path):
        folder = _copy_default(tmp_path)
        raw = json.loads((folder / "unmask.json").read_text())
        raw["size_bytes"] = 1 << 50  # a petabyte: no machine has that free
        (folder / "unmask.json").write_text(json.dumps(raw))
        (folder / "model.onnx").write_bytes(b"not read: the device check refuses first")
        with pytest.raises(unmask.DeviceError, match="memory"):
            unmask.load(folder, device="cpu")
