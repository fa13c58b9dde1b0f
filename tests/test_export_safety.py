"""Export safety: OUT never deletes the source, signals and crashes leave no staging folders behind,
--force replaces a symlink cleanly, and a tokenizer the runtime cannot use is refused before writing."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap

import pytest

from unmask import ConfigError, ModelFormatError
from unmask.cli import main
from unmask.export import export_model
from unmask.export.package import STAGING_MARK, clean_stale
from unmask.export.testing import make_llada_checkpoint
from unmask.manifest import read_manifest

HANG_GUARD_S = 120


@pytest.fixture(scope="module")
def llada(tmp_path_factory):
    return make_llada_checkpoint(tmp_path_factory.mktemp("llada") / "hf")


def _hidden(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def _checkpoint(llada, folder):
    shutil.copytree(llada, folder)
    return folder


class TestSourceIsSafe:
    @pytest.mark.parametrize("where", ["src", "parent"])
    def test_force_onto_source_or_its_parent_is_refused(self, llada, tmp_path, capsys, where):
        src = _checkpoint(llada, tmp_path / "work" / "hf")
        before = sorted(p.name for p in src.iterdir())
        out = src if where == "src" else src.parent
        with pytest.raises(ConfigError, match="source"):
            export_model(src, out, quiet=True, force=True, validate=False)
        assert main(["export", str(src), str(out), "--force", "--no-validate", "-q"]) == 1
        assert "checkpoint" in capsys.readouterr().err
        assert sorted(p.name for p in src.iterdir()) == before

    def test_force_onto_a_symlink_to_the_source_is_refused(self, llada, tmp_path):
        src = _checkpoint(llada, tmp_path / "hf")
        (tmp_path / "link").symlink_to(src)
        with pytest.raises(ConfigError, match="source"):
            export_model(src, tmp_path / "link", quiet=True, force=True, validate=False)
        assert (src / "config.json").is_file()


DRIVER = textwrap.dedent("""
    import sys, time
    from unmask.export import builder, export_model
    build = builder.GraphBuilder.mlp
    def slow(self, *args, **kwargs):  # hold the export inside its staging folder until signalled
        print("staging", flush=True)
        time.sleep(60)
        return build(self, *args, **kwargs)
    builder.GraphBuilder.mlp = slow
    export_model(sys.argv[1], sys.argv[2], quiet=True, validate=False)
""")


def _signal_midway(src, out, signum) -> int:
    """Start an export in a child, send `signum` once it is writing its staging folder; its pid."""
    with subprocess.Popen([sys.executable, "-c", DRIVER, str(src), str(out)], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as child:
        try:
            assert child.stdout.readline() == "staging\n", child.stderr.read()
            assert [p for p in _hidden(out.parent) if ".partial-" in p]
            child.send_signal(signum)
            child.wait(timeout=HANG_GUARD_S)
        finally:
            child.kill()
    return child.pid


@pytest.mark.skipif(os.name != "posix", reason="SIGHUP, SIGKILL and the liveness probe are POSIX")
class TestStagingCleanup:
    @pytest.mark.parametrize("signum", [signal.SIGTERM, getattr(signal, "SIGHUP", signal.SIGTERM)])
    def test_signal_removes_the_staging_folder(self, llada, tmp_path, signum):
        _signal_midway(llada, tmp_path / "pkg", signum)
        assert _hidden(tmp_path) == [] and not (tmp_path / "pkg").exists()

    def test_next_export_removes_what_sigkill_left(self, llada, tmp_path):
        pid = _signal_midway(llada, tmp_path / "pkg", getattr(signal, "SIGKILL", signal.SIGTERM))
        assert _hidden(tmp_path) == [f".pkg.partial-{pid}"]  # SIGKILL cannot be caught
        export_model(llada, tmp_path / "other", quiet=True, validate=False)
        assert _hidden(tmp_path) == []
        assert not (tmp_path / "other" / STAGING_MARK).exists()

    def test_only_marked_folders_of_dead_processes_are_removed(self, tmp_path):
        live = tmp_path / f".a.partial-{os.getpid()}"
        unmarked = tmp_path / ".b.partial-999999999"
        dead = tmp_path / ".c.partial-999999999"
        for folder in (live, unmarked, dead):
            folder.mkdir()
        (live / STAGING_MARK).touch()
        (dead / STAGING_MARK).touch()
        assert clean_stale(tmp_path) == [dead]
        assert _hidden(tmp_path) == [live.name, unmarked.name]


class TestForce:
    def test_force_onto_a_symlink_replaces_the_link_only(self, llada, tmp_path):
        target = tmp_path / "target"
        target.mkdir()
        (target / "keep").write_text("x")
        (tmp_path / "pkg").symlink_to(target)
        export_model(llada, tmp_path / "pkg", quiet=True, force=True, validate=False)
        assert not (tmp_path / "pkg").is_symlink() and read_manifest(tmp_path / "pkg").architecture == "llada"
        assert (target / "keep").read_text() == "x"
        assert _hidden(tmp_path) == []


class TestTokenizerChecked:
    def _refused(self, src, tmp_path):
        with pytest.raises(ModelFormatError, match="tokenizer"):
            export_model(src, tmp_path / "pkg", quiet=True, validate=False)
        assert not (tmp_path / "pkg").exists() and _hidden(tmp_path) == []

    def test_tokenizer_the_library_cannot_read(self, llada, tmp_path):
        src = _checkpoint(llada, tmp_path / "hf")
        raw = json.loads((src / "tokenizer.json").read_text())
        raw["model"]["type"] = "NoSuchModel"
        (src / "tokenizer.json").write_text(json.dumps(raw))
        self._refused(src, tmp_path)

    def test_tokenizer_beyond_the_runtime_limits(self, llada, tmp_path):
        src = _checkpoint(llada, tmp_path / "hf")
        raw = json.loads((src / "tokenizer.json").read_text())
        raw["added_tokens"].append({"id": 100000, "content": "a" * 5000, "single_word": False, "lstrip": False,
                                    "rstrip": False, "normalized": False, "special": True})
        (src / "tokenizer.json").write_text(json.dumps(raw))
        self._refused(src, tmp_path)
