"""The model store: names resolve to packages, `unmask list` / `unmask rm`, every command takes a name.

A real package is exported once (tiny random LLaDA) and copied into a store per test; the
commands run through the console entry point (`unmask.cli.main`), as a shell would.
"""

import io
import json
import shutil

import pytest

import unmask
from unmask import ConfigError, ModelFormatError
from unmask import store
from unmask.cli import main


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    from unmask.export import export_model
    from unmask.export.testing import make_llada_checkpoint

    root = tmp_path_factory.mktemp("pkg")
    ckpt = make_llada_checkpoint(root / "ckpt")
    return export_model(ckpt, root / "tiny", precision="int8", validate=False, quiet=True).path


@pytest.fixture
def models(tmp_path, monkeypatch, package):
    """An empty store in $UNMASK_MODELS, the current directory elsewhere; returns the store folder."""
    folder = tmp_path / "store"
    monkeypatch.setenv(store.ENV, str(folder))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return folder


def put(models, package, name="tiny"):
    shutil.copytree(package, models / name)
    return models / name


def cli(args, capsys):
    code = main(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


class TestStoreFolder:
    def test_env_overrides(self, monkeypatch, tmp_path):
        monkeypatch.setenv(store.ENV, str(tmp_path / "m"))
        assert store.store_dir() == tmp_path / "m"

    def test_default_is_user_data_folder(self, monkeypatch, tmp_path):
        monkeypatch.delenv(store.ENV, raising=False)
        monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
        monkeypatch.setattr("sys.platform", "linux")
        assert store.store_dir() == tmp_path / "data" / "unmask" / "models"

    @pytest.mark.parametrize("text,ok", [("tiny", True), ("llada-8b.int4_v2", True), (".hidden", False),
                                         ("a/b", False), ("..", False), ("", False), ("x y", False)])
    def test_names(self, text, ok):
        assert store.is_name(text) is ok


class TestResolve:
    def test_name_and_path(self, models, package):
        stored = put(models, package)
        assert store.resolve("tiny") == stored
        assert store.resolve(None) is None
        assert store.resolve(str(package)) == package  # a path is a path

    def test_existing_local_folder_wins(self, models, package, tmp_path):
        put(models, package)
        shutil.copytree(package, "tiny")  # ./tiny in the current directory
        assert store.resolve("tiny").resolve() == (tmp_path / "work" / "tiny").resolve()

    def test_unknown_name_says_where_it_looked(self, models):
        with pytest.raises(ModelFormatError, match=r"nope: no such folder here and no model package .*unmask list"):
            store.resolve("nope")

    def test_missing_path_left_to_the_caller(self, models):
        assert str(store.resolve("./nope")) == "nope"

    def test_target(self, models):
        assert store.target("tiny") == models / "tiny" and models.is_dir()
        assert str(store.target("./tiny")) == "tiny"
        assert str(store.target("out/tiny")) == "out/tiny"


class TestCommands:
    def test_list_rm_and_load_by_name(self, models, package, capsys):
        code, out, err = cli(["list"], capsys)
        assert code == 0 and "no model packages in" in out
        put(models, package, "tiny")
        put(models, package, "other")
        code, out, err = cli(["list"], capsys)
        lines = out.splitlines()
        assert code == 0 and lines[0].split() == ["name", "family", "precision", "size", "where"]
        assert [line.split()[:3] for line in lines[1:]] == [["other", "llada", "int8"], ["tiny", "llada", "int8"]]
        assert lines[2].endswith(str(models / "tiny"))
        doc = json.loads(cli(["list", "--json"], capsys)[1])
        size = sum(f.stat().st_size for f in (models / "tiny").rglob("*") if f.is_file())
        assert doc[1] == {"name": "tiny", "architecture": "llada", "precision": "int8", "size_bytes": size,
                          "path": str(models / "tiny"), "problem": None}

        model = unmask.load("tiny", device="cpu")
        assert model.package.folder == models / "tiny"
        assert model.generate("hi", gen_length=8, block_length=8, steps=8).stats.nfe == 8

        code, out, err = cli(["rm", "other"], capsys)
        assert code == 0 and out.startswith("removed other") and not (models / "other").exists()
        assert [e.name for e in store.entries()] == ["tiny"]

    @pytest.mark.parametrize("command", [
        ["info", "tiny", "--json"],
        ["devices", "--model", "tiny", "--json"],
        ["generate", "tiny", "-p", "hi", "--gen-length", "8", "--block-length", "8", "--json"],
        ["bench", "tiny", "--runs", "1", "--warmup", "0", "--gen-length", "8", "--block-length", "8", "--json"],
        ["chat", "tiny", "--no-stream", "--gen-length", "8", "--block-length", "8"],
    ])
    def test_every_command_takes_a_name(self, models, package, capsys, monkeypatch, command):
        put(models, package)
        monkeypatch.setattr("sys.stdin", io.StringIO("hi\n"))  # chat: one piped turn
        code, out, err = cli(command, capsys)
        assert code == 0, err
        if command[0] == "chat":
            assert out.endswith("\n") and "error" not in err
            return
        doc = json.loads(out)
        if command[0] == "info":
            assert doc["path"] == str(models / "tiny")
        elif command[0] == "generate":
            assert len(doc["token_ids"]) == 8
        elif command[0] == "bench":
            assert doc["model"]["path"] == str(models / "tiny") and (models.parent / "work" / "bench-tiny").is_dir()

    def test_unknown_name_is_one_line(self, models, capsys):
        code, out, err = cli(["generate", "nope", "-p", "hi"], capsys)
        assert code == 1 and err.count("\n") == 1 and "unmask list" in err and "Traceback" not in err

    def test_rm_refuses_paths_and_unknown(self, models, package, tmp_path, capsys):
        shutil.copytree(package, tmp_path / "keep")
        code, out, err = cli(["rm", str(tmp_path / "keep")], capsys)
        assert code == 1 and "not a store name" in err and (tmp_path / "keep").is_dir()
        code, out, err = cli(["rm", "nope"], capsys)
        assert code == 1 and "no model package of that name" in err
        with pytest.raises(ConfigError):
            store.remove("../keep")

    def test_unreadable_entry_listed(self, models, package, capsys):
        broken = put(models, package, "broken")
        (broken / "unmask.json").write_text("{")
        code, out, err = cli(["list"], capsys)
        assert code == 0 and "broken" in out and "unreadable" in out
