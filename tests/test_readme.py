"""README's "The first hour": every command of its ```bash blocks, run in order as a newcomer runs them.

The commands are read from the README itself (so a changed README is a changed test) and run
with bash in a fresh folder, with this Python's `unmask` and `python` first on PATH, an empty
model store ($UNMASK_MODELS) and an offline Hugging Face cache holding a tiny random checkpoint
under the repo id the README names (HF_HUB_OFFLINE=1: nothing reaches the network).
`pip install` lines are not run (no index, no build here): the extra they name must exist in
pyproject.toml. `unmask chat` reads one question from stdin, as a piped chat does.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from test_export_hub import hub_cache

from unmask.export.testing import make_llada_checkpoint

ROOT = Path(__file__).resolve().parents[1]
SECTION = "## The first hour"
QUESTION = "What is 12 + 30?\n"


def first_hour_commands() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    section = text[start:end if end != -1 else None]
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", section, flags=re.S):
        commands += [line.strip() for line in block.splitlines() if line.strip() and not line.startswith("#")]
    return commands


COMMANDS = first_hour_commands()


def test_the_walkthrough_covers_the_first_hour():
    """install -> chat -> random checkpoint -> export to a name -> list -> generate -> Hub -> bench --profile -> rm."""
    order = ["pip install", "unmask chat", "random_checkpoint", "unmask export ./", "unmask list",
             "unmask generate tiny", "unmask export GSAI-ML/", "unmask bench tiny --profile", "unmask rm tiny"]
    positions = [next(i for i, c in enumerate(COMMANDS) if key in c) for key in order]
    assert positions == sorted(positions) and len(COMMANDS) == len(order)


def test_pip_install_names_a_real_extra():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    installs = [c for c in COMMANDS if c.startswith("pip install")]
    assert installs
    for command in installs:
        wanted = re.search(r'"\.\[(\w+)\]"', command).group(1)
        assert wanted in extras and any(dep.startswith("huggingface-hub") for dep in extras[wanted])


@pytest.fixture(scope="module")
def newcomer(tmp_path_factory):
    """A fresh working folder and the environment of a user's shell (see the module docstring)."""
    root = tmp_path_factory.mktemp("newcomer")
    work = root / "work"
    work.mkdir()
    ckpt = make_llada_checkpoint(root / "hub-ckpt", dtype="bfloat16", max_sequence_length=512)
    repo = next(c.split()[2] for c in COMMANDS if c.startswith("unmask export GSAI-ML/"))
    cache = hub_cache(root / "hf" / "hub", repo, ckpt)
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
           "UNMASK_MODELS": str(root / "models"), "HF_HOME": str(root / "hf"), "HF_HUB_CACHE": str(cache),
           "HF_HUB_OFFLINE": "1"}
    if not (bin_dir / "python").exists():  # `python` in the README is this interpreter
        (root / "bin").mkdir()
        (root / "bin" / "python").symlink_to(sys.executable)
        env["PATH"] = f"{root / 'bin'}{os.pathsep}{env['PATH']}"
    return work, env, root / "models"


def test_every_command_runs(newcomer):
    work, env, models = newcomer
    outputs = {}
    for command in COMMANDS:
        if command.startswith("pip install"):
            continue
        done = subprocess.run(["bash", "-c", command], cwd=work, env=env, input=QUESTION, capture_output=True,
                              text=True, timeout=600)
        assert done.returncode == 0, f"{command}\n{done.stderr}"
        outputs[command] = done.stdout

    def by_start(prefix: str) -> str:
        return next(out for c, out in outputs.items() if c.startswith(prefix))

    assert "42" in by_start("unmask chat")  # the embedded model answers the piped question
    assert by_start("unmask list").splitlines()[1].split()[:3] == ["tiny", "llada", "fp32"]
    assert by_start("unmask generate tiny")
    assert json.loads((models / "llada-int4" / "unmask.json").read_text())["precision"] == "int4"
    bench = json.loads((work / "bench-tiny" / "bench.json").read_text())
    assert bench["profile"]["operators"] and (work / "bench-tiny" / "ort_profile.json").is_file()
    assert "share of step time" in by_start("unmask bench tiny")
    assert not (models / "tiny").exists() and (models / "llada-int4").is_dir()  # `unmask rm tiny` ran last
