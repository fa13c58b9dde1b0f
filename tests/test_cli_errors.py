"""Errors become typed where they arise, so `unmask` prints one line (issue 35 item 6).

A full disk while export writes the tokenizer or the manifest, a non-path given to
unmask.load: each is an UnmaskError naming what failed; `main()` converts only those.
And what a package records as its source (provenance) is a name a person recognises.
"""

from __future__ import annotations

import errno
import json
import os
import shutil

import pytest

import unmask
from unmask.cli import main
from unmask.export.provenance import source_label
from unmask.export.testing import make_llada_checkpoint


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return make_llada_checkpoint(tmp_path_factory.mktemp("errors") / "hf")


def _disk_full(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def export_fails(checkpoint, out, capsys):
    code = main(["export", str(checkpoint), str(out), "--no-validate", "--quiet"])
    err = capsys.readouterr().err
    assert code == 1 and err.startswith("error: ") and err.count("\n") == 1, err
    assert not out.exists() and not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}")]
    return err


class TestExportWrites:
    def test_tokenizer_copy(self, checkpoint, tmp_path, monkeypatch, capsys):
        monkeypatch.setattr(shutil, "copyfile", _disk_full)
        err = export_fails(checkpoint, tmp_path / "pkg", capsys)
        assert "tokenizer.json" in err and "No space left on device" in err

    def test_manifest(self, checkpoint, tmp_path, monkeypatch, capsys):
        monkeypatch.setattr(unmask.manifest, "write_text_atomic", _disk_full)
        err = export_fails(checkpoint, tmp_path / "pkg", capsys)
        assert "unmask.json: cannot write the manifest (No space left on device)" in err


class TestLoadArguments:
    @pytest.mark.parametrize("path", [123, 1.5, ["pkg"]])
    def test_path_type(self, path):
        with pytest.raises(unmask.ConfigError, match="path must be a package folder"):
            unmask.load(path)


class TestSourceLabel:
    @pytest.fixture(autouse=True)
    def temp_dir(self, checkpoint, tmp_path, monkeypatch):
        """The temp directory holds pytest's folders, even under --basetemp: their names mean nothing."""
        monkeypatch.setattr("tempfile.tempdir", os.path.commonpath([checkpoint, tmp_path]))

    def test_scratch_folder_names_the_model_kind(self, checkpoint):
        assert source_label(checkpoint) == "LLaDAModelLM from a temporary folder"

    def test_config_name_or_path(self, checkpoint, tmp_path):
        folder = shutil.copytree(checkpoint, tmp_path / "tmpk3j2")
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, "_name_or_path": "GSAI-ML/LLaDA-8B-Instruct"}))
        assert source_label(folder) == "GSAI-ML/LLaDA-8B-Instruct"

    def test_saved_local_path_is_not_a_name(self, checkpoint, tmp_path):
        folder = shutil.copytree(checkpoint, tmp_path / "copy")
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, "_name_or_path": "/scratch/run3/ckpt"}))
        assert source_label(folder) == "LLaDAModelLM from a temporary folder"

    def test_hub_snapshot(self, checkpoint, tmp_path):
        snapshot = tmp_path / "models--GSAI-ML--LLaDA-8B-Base" / "snapshots" / ("0123456789abcdef" * 3)[:40]
        shutil.copytree(checkpoint, snapshot)
        assert source_label(snapshot) == "GSAI-ML/LLaDA-8B-Base"

    def test_named_folder(self, checkpoint, monkeypatch, tmp_path):
        folder = shutil.copytree(checkpoint, tmp_path / "LLaDA-8B-Instruct")
        monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "elsewhere"))  # not under the temp dir now
        assert source_label(folder) == "LLaDA-8B-Instruct"

    def test_export_records_it(self, checkpoint, tmp_path, capsys):
        out = tmp_path / "pkg"
        assert main(["export", str(checkpoint), str(out), "--no-validate", "--quiet"]) == 0
        provenance = unmask.manifest.read_manifest(out).provenance
        assert provenance["source"] == "LLaDAModelLM from a temporary folder"
        assert provenance["source_path"] == str(checkpoint.resolve())
        capsys.readouterr()
        assert main(["info", str(out)]) == 0
        assert "source LLaDAModelLM from a temporary folder" in capsys.readouterr().out


class TestDevicesProbe:
    """A provider the wheel lists is not usable unless the probe's node really runs on it."""

    def test_listed_provider_that_runs_nothing_fails_its_probe(self, monkeypatch, capsys):
        import dataclasses

        import onnxruntime as ort

        from unmask import devices
        from unmask.devices.probe import clear_cache

        # AzureExecutionProvider is in this wheel's list but computes no Add: as CUDA without a GPU,
        # a session "with" it runs everything on the CPU while get_providers() still names it
        assert "AzureExecutionProvider" in ort.get_available_providers()
        profiles = devices.load_profiles()
        cuda = next(p for p in profiles if p.device == "cuda")
        lookalike = dataclasses.replace(cuda, name="cuda-lookalike", provider="AzureExecutionProvider",
                                        provider_options={}, os=("linux", "windows", "darwin"))
        monkeypatch.setattr(devices, "load_profiles", lambda *a, **k: (*profiles, lookalike))
        clear_cache()
        assert main(["devices", "--json"]) == 0
        row = next(r for r in json.loads(capsys.readouterr().out)["profiles"] if r["name"] == "cuda-lookalike")
        assert row["in_build"] and row["probe"]["ok"] is False
        assert "AzureExecutionProvider did not run the probe graph" in row["probe"]["reason"]
