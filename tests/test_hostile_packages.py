"""Hostile packages (tests/hostile_packages.py) are refused cleanly by unmask.load and `unmask info --verify`.

Each case runs in its own Python process with its address space capped (RLIMIT_AS), so a
memory blow-up fails the case instead of the machine, and with a timeout, so a hang fails
it instead of the suite. Neither is a timing assertion: a clean refusal takes well under both.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from hostile_packages import CASES, build

resource = pytest.importorskip("resource")  # RLIMIT_AS: POSIX only

ADDRESS_SPACE = 1 << 30  # loading the embedded model peaks near 250 MB of address space
HANG_GUARD_S = 120  # far above a refusal (the slowest, a template loop bomb, stops after 2 s)

DRIVER = textwrap.dedent("""
    import sys, unmask
    from unmask.cli import main
    try:
        unmask.load(sys.argv[1], device="cpu", threads=1)
        print("load: LOADED")
    except unmask.ModelFormatError:
        print("load: refused")
    sys.stdout.flush()
    print(f"cli: exit {main(['info', '--verify', sys.argv[1]])}")
""")


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def run_case(folder) -> subprocess.CompletedProcess:
    try:
        return subprocess.run([sys.executable, "-c", DRIVER, str(folder)], capture_output=True, text=True,
                              timeout=HANG_GUARD_S, preexec_fn=_limit_memory)
    except subprocess.TimeoutExpired:
        pytest.fail(f"hung for {HANG_GUARD_S} s")


@pytest.mark.parametrize("case", sorted(CASES))
def test_refused_cleanly(case, tmp_path):
    done = run_case(build(case, tmp_path / "pkg"))
    assert done.returncode == 0, f"crashed ({done.returncode}):\n{done.stderr[-2000:]}"
    assert done.stdout.split("\n")[:2] == ["load: refused", "cli: exit 1"], done.stdout + done.stderr[-2000:]
    errors = done.stderr.strip().split("\n")
    assert len(errors) == 1 and errors[0].startswith("error: "), done.stderr[-2000:]


def test_the_valid_package_loads(tmp_path):
    """The driver and limits accept the undamaged package, so every refusal above is the damage's."""
    import shutil

    from unmask.model import default_package_dir

    folder = tmp_path / "pkg"
    shutil.copytree(default_package_dir(), folder)
    done = run_case(folder)
    assert done.stdout.split("\n")[0] == "load: LOADED", done.stdout + done.stderr[-2000:]
    assert "cli: exit 0" in done.stdout and "sha256 verified" in done.stdout
