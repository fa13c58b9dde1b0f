"""`unmask export` from a Hub repo id (offline, from a cache in the hub's own layout), without the
export extra, and from the random checkpoint a newcomer can write in a minute.

The commands run as a user runs them: the `unmask` console script in a subprocess, with
HF_HUB_OFFLINE=1 and the cache in a temporary folder, so nothing reaches the network.
"""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import unmask
from unmask import ConfigError
from unmask.export import hub
from unmask.export.testing import make_llada_checkpoint

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def unmask_cli() -> list[str]:
    """The installed console script beside this Python (the real entry point)."""
    script = Path(sys.executable).with_name("unmask")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "unmask"]


def run(args, env=None, cwd=None, timeout=300):
    full = {**os.environ, **(env or {})}
    return subprocess.run(args, env=full, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def hub_cache(root: Path, repo_id: str, checkpoint: Path, extra_files: dict[str, bytes] | None = None) -> Path:
    """A Hugging Face cache holding `checkpoint` as repo_id at COMMIT, laid out as huggingface_hub does:
    models--owner--name/blobs/<sha256>, snapshots/<commit>/<file> -> ../../blobs/<sha256>, refs/main."""
    repo = root / ("models--" + repo_id.replace("/", "--"))
    blobs, snapshot = repo / "blobs", repo / "snapshots" / COMMIT
    blobs.mkdir(parents=True)
    snapshot.mkdir(parents=True)
    files = {p.name: p.read_bytes() for p in checkpoint.iterdir() if p.is_file()} | (extra_files or {})
    for name, data in files.items():
        digest = hashlib.sha256(data).hexdigest()
        (blobs / digest).write_bytes(data)
        os.symlink(Path("..") / ".." / "blobs" / digest, snapshot / name)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    return root


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return make_llada_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny-llada", dtype="bfloat16")


class TestRepoId:
    @pytest.mark.parametrize("text,expected", [("GSAI-ML/LLaDA-8B-Instruct", True), ("owner/name.v2", True),
                                               ("./owner/name", False), ("/abs/path", False), ("name", False),
                                               ("a/b/c", False), ("../x", False), ("owner/..", False)])
    def test_rule(self, text, expected, tmp_path, monkeypatch):
        monkeypatch.chdir(tmp_path)
        assert hub.is_repo_id(text) is expected

    def test_existing_local_folder_wins(self, tmp_path, monkeypatch):
        monkeypatch.chdir(tmp_path)
        (tmp_path / "owner" / "name").mkdir(parents=True)
        assert not hub.is_repo_id("owner/name")
        assert hub.checkpoint_folder("owner/name") == Path("owner/name")

    def test_fetches_only_what_the_exporter_reads(self, monkeypatch, checkpoint):
        import fnmatch

        import huggingface_hub

        asked = {}

        def fake_download(repo_id, **kwargs):
            asked.update(kwargs, repo_id=repo_id)
            return str(checkpoint)

        monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_download)
        assert hub.fetch("owner/tiny") == checkpoint
        patterns = asked["allow_patterns"]
        assert asked["repo_id"] == "owner/tiny" and patterns == list(hub.CHECKPOINT_FILES)
        wanted = ["config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors",
                  "model-00001-of-00002.safetensors", "model.safetensors.index.json"]
        unwanted = ["pytorch_model.bin", "modeling_llada.py", "README.md", "generation_config.json"]
        assert all(any(fnmatch.fnmatch(f, p) for p in patterns) for f in wanted)
        assert not any(fnmatch.fnmatch(f, p) for f in unwanted for p in patterns)


class TestExportFromHub:
    def test_offline_cache_to_a_name(self, tmp_path, checkpoint):
        cache = hub_cache(tmp_path / "hf" / "hub", "owner/tiny-llada", checkpoint,
                          extra_files={"pytorch_model.bin": b"not read"})
        env = {"HF_HOME": str(tmp_path / "hf"), "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1",
               "UNMASK_MODELS": str(tmp_path / "models")}
        done = run([*unmask_cli(), "export", "owner/tiny-llada", "tiny", "--precision", "int8", "-q"],
                   env=env, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        stored = tmp_path / "models" / "tiny"
        manifest = json.loads((stored / "unmask.json").read_text())
        assert manifest["architecture"] == "llada" and manifest["precision"] == "int8"

        listed = run([*unmask_cli(), "list", "--json"], env=env, cwd=tmp_path)
        assert [e["name"] for e in json.loads(listed.stdout)] == ["tiny"]
        os.environ["UNMASK_MODELS"] = env["UNMASK_MODELS"]
        try:
            model = unmask.load("tiny", device="cpu")
        finally:
            del os.environ["UNMASK_MODELS"]
        result = model.generate("hi", gen_length=8, block_length=8, steps=8)
        assert result.stats.nfe == 8 and len(result.token_ids) == 8

    def test_offline_not_cached_is_one_line(self, tmp_path):
        env = {"HF_HOME": str(tmp_path / "hf"), "HF_HUB_CACHE": str(tmp_path / "hf" / "hub"), "HF_HUB_OFFLINE": "1"}
        done = run([*unmask_cli(), "export", "owner/absent", str(tmp_path / "out")], env=env, cwd=tmp_path)
        assert done.returncode == 1
        assert done.stderr.startswith("error: owner/absent: not in the Hugging Face cache")
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
        assert not (tmp_path / "out").exists()

    def test_existing_out_refused_before_fetching(self, tmp_path, monkeypatch):
        from unmask.cli import main

        import huggingface_hub

        monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda *a, **k: pytest.fail("fetched"))
        (tmp_path / "out").mkdir()
        assert main(["export", "owner/tiny", str(tmp_path / "out")]) == 1

    def test_hub_errors_become_config_errors(self, monkeypatch):
        import huggingface_hub
        from huggingface_hub.utils import LocalEntryNotFoundError

        def offline(*args, **kwargs):
            raise LocalEntryNotFoundError("cannot find the requested files in the disk cache")

        monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
        with pytest.raises(ConfigError, match="not in the Hugging Face cache"):
            hub.fetch("owner/tiny")


# A sitecustomize that makes `import onnx` (and torch) fail, as in an install without the extras.
BLOCKER = textwrap.dedent("""
    import sys

    class _Blocked:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("onnx", "torch"):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, _Blocked())
""")


@pytest.fixture
def blocked_env(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCKER)
    return {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}


class TestWithoutExtra:
    def test_export_names_the_extra(self, tmp_path, checkpoint, blocked_env):
        check = run([sys.executable, "-c", "import onnx"], env=blocked_env)
        assert check.returncode == 1 and "No module named 'onnx'" in check.stderr  # the blocker works
        done = run([*unmask_cli(), "export", str(checkpoint), str(tmp_path / "out")], env=blocked_env)
        assert done.returncode == 1
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
        assert 'pip install "unmask[export]"' in done.stderr

    def test_random_checkpoint_needs_no_torch_nor_onnx(self, tmp_path, blocked_env):
        out = tmp_path / "tiny-dream"
        done = run([sys.executable, "-m", "unmask.export.random_checkpoint", "dream", str(out)], env=blocked_env)
        assert done.returncode == 0, done.stderr
        assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors", "tokenizer.json",
                                                         "tokenizer_config.json"]
        config = json.loads((out / "config.json").read_text())
        assert config["architectures"] == ["DreamModel"] and config["torch_dtype"] == "bfloat16"
        header_len = int.from_bytes((out / "model.safetensors").read_bytes()[:8], "little")
        header = json.loads((out / "model.safetensors").read_bytes()[8:8 + header_len])
        assert {v["dtype"] for k, v in header.items() if k != "__metadata__"} == {"BF16"}
        again = run([sys.executable, "-m", "unmask.export.random_checkpoint", "dream", str(out)], env=blocked_env)
        assert again.returncode == 1 and "already exists" in again.stderr
        shutil.rmtree(out)
