"""Errors become typed where they arise, so `unmask` prints one line (issue 35 item 6).

A full disk while export writes the tokenizer or the manifest, a non-path given to
unmask.load: each is an UnmaskError naming what failed; `main()` converts only those.
"""

from __future__ import annotations

import errno
import shutil

import pytest

import unmask
from unmask.cli import main
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
