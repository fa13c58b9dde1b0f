"""unmask.devices.threads: CPU threads and ORT spinning from the core count and the load.

The rule with numbers (choose_threads), the load reading (detect.load_average), what
select() puts into a Placement, what `unmask devices` shows through the real CLI entry
point, and that unmask.load's ONNX Runtime session really runs with the shown settings
(read back from the session's own options). The machine's load is pinned by replacing
detect.load_average, so nothing depends on what else runs during the tests.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os

import pytest

import unmask
from unmask import ConfigError
from unmask.cli import main
from unmask.devices import CpuInfo, Detection, ProbeResult, detect, load_profiles, select
from unmask.devices.threads import SMALL_HIDDEN, busy_cores, choose_threads
from unmask.export import export_model
from unmask.export.testing import make_llada_checkpoint
from unmask.model import default_package_dir

detect_module = importlib.import_module("unmask.devices.detect")  # the package's `detect` is the function
PROFILES = {p.name: p for p in load_profiles()}
X86 = PROFILES["cpu-x86"]
HERE = PROFILES["cpu-x86" if detect().cpu.arch == "x86_64" else "cpu-arm64"]
SPIN_KEYS = ("session.intra_op.allow_spinning", "session.inter_op.allow_spinning")


def with_session(profile, **changes):
    return dataclasses.replace(profile, session=dataclasses.replace(profile.session, **changes))


def cpu_probe(profile, options=None):
    return ProbeResult(True, ("CPUExecutionProvider",))


def machine(cores: int, load: float | None) -> Detection:
    cpu = CpuInfo(model="test CPU", arch="x86_64", physical_cores=cores, logical_cores=cores, load=load)
    return Detection(cpu=cpu)


@pytest.fixture(scope="module")
def wide_package(tmp_path_factory):
    """A one-layer random LLaDA package of hidden size SMALL_HIDDEN: big enough for the load rule."""
    root = tmp_path_factory.mktemp("wide")
    checkpoint = make_llada_checkpoint(root / "ckpt", d_model=SMALL_HIDDEN, n_layers=1, n_heads=4, mlp_hidden_size=64)
    export_model(checkpoint, root / "pkg", "fp32", quiet=True, validate=False)
    return root / "pkg"


@pytest.fixture
def pinned_load(monkeypatch):
    """set(load): every detect() from now on reads this 1-minute load average."""
    def set_load(load: float | None) -> None:
        monkeypatch.setattr(detect_module, "load_average", lambda logical: load)
    return set_load


class TestRule:
    @pytest.mark.parametrize("load, cores, busy", [(None, 2, 0), (0.0, 2, 0), (0.49, 2, 0), (0.5, 2, 1),
                                                   (1.4, 2, 1), (2.6, 2, 2), (40.0, 2, 2), (3.6, 16, 4)])
    def test_busy_cores_round_the_load_and_stop_at_the_core_count(self, load, cores, busy):
        assert busy_cores(load, cores) == busy

    @pytest.mark.parametrize("cores, load, threads", [(2, 0.2, 2), (2, 0.6, 1), (2, 1.0, 1), (2, 9.0, 1),
                                                      (16, 3.6, 12), (16, 0.0, 16), (1, 0.0, 1), (8, None, 8)])
    def test_threads_are_the_cores_the_load_leaves_free(self, cores, load, threads):
        choice = choose_threads(X86, cores, load)
        assert choice.threads == threads and choice.spinning is False

    def test_reasons_name_the_numbers(self):
        idle = choose_threads(X86, 2, 0.2)
        assert idle.threads_why == "physical cores, all idle (load 0.2)"
        assert idle.spinning_why.startswith("profile cpu-x86: spinning pool threads ran 0.2-0.8x of the best")
        busy = choose_threads(X86, 4, 2.2)
        assert busy.threads == 2 and busy.threads_why.startswith("load 2.2 keeps 2 of 4 physical cores busy")
        assert choose_threads(X86, 2, 1.0).spinning_why == "one thread has no pool to spin"
        assert choose_threads(X86, 4, None).threads_why == "physical cores (no load average on this OS)"

    def test_a_profile_that_allows_spinning_spins_only_with_a_pool(self):
        spinning = with_session(X86, allow_spinning=True)
        assert choose_threads(spinning, 2, 0.1).spinning is True
        assert choose_threads(spinning, 2, 1.2).spinning is False  # one free core: one thread, no pool

    @pytest.mark.parametrize("hidden, threads", [(128, 1), (SMALL_HIDDEN - 1, 1), (SMALL_HIDDEN, 4), (None, 4)])
    def test_a_small_model_gets_one_thread_on_an_idle_machine(self, hidden, threads):
        choice = choose_threads(X86, 4, 0.0, hidden_size=hidden)
        assert choice.threads == threads
        assert choice.threads_why.startswith(f"hidden size {hidden} < {SMALL_HIDDEN}") == (threads == 1)

    def test_profile_thread_count_and_caller_overrides_win(self):
        fixed = with_session(X86, intra_op_threads=3)
        assert (choose_threads(fixed, 8, 7.0).threads, choose_threads(fixed, 8, 7.0).threads_why) == (
            3, "set by profile cpu-x86")
        asked = choose_threads(fixed, 8, 7.0, threads=5, spinning=True)
        assert (asked.threads, asked.spinning, asked.threads_why, asked.spinning_why) == (5, True, "asked for",
                                                                                       "asked for")
        assert choose_threads(X86, 2, 0.0, threads=1, spinning=True).spinning is True  # asked for, kept


class TestLoadAverage:
    def test_scaled_to_the_hardware_threads_this_process_may_use(self, monkeypatch):
        monkeypatch.setattr(os, "getloadavg", lambda: (4.0, 3.0, 2.0))
        monkeypatch.setattr(os, "cpu_count", lambda: 16)
        assert detect_module.load_average(2) == pytest.approx(0.5)  # 2 of 16 threads see 1/8 of the load
        assert detect_module.load_average(16) == pytest.approx(4.0)

    def test_an_os_without_one_gives_none(self, monkeypatch):
        monkeypatch.delattr(os, "getloadavg")
        assert detect_module.load_average(4) is None

    def test_detect_reads_it(self, pinned_load):
        pinned_load(1.25)
        assert detect().cpu.load == 1.25


class TestPlacement:
    @pytest.mark.parametrize("load, threads", [(0.1, 4), (2.7, 1)])
    def test_select_carries_the_choice_and_explains_it(self, load, threads):
        p = select(None, "cpu", detection=machine(4, load), probe=cpu_probe)
        assert (p.threads, p.spinning) == (threads, False)
        assert f"  threads: {threads} ({p.threads_why})" in p.explanation.splitlines()
        assert f"  spinning: off ({p.spinning_why})" in p.explanation.splitlines()
        d = p.to_dict()
        assert (d["threads"], d["spinning"], d["threads_why"], d["spinning_why"]) == (
            threads, False, p.threads_why, p.spinning_why)
        so = p.session_options()
        assert so.intra_op_num_threads == threads
        assert [so.get_session_config_entry(k) for k in SPIN_KEYS] == ["0", "0"]

    def test_spinning_override_is_checked(self):
        with pytest.raises(ConfigError, match="spinning must be True, False or None"):
            select(None, "cpu", detection=machine(2, 0.0), probe=cpu_probe, spinning="yes")


class TestLoadAndDevicesAgree:
    """`unmask devices --json` shows what unmask.load's session really runs with."""

    @pytest.mark.parametrize("load", [0.0, 50.0])
    def test_devices_json_matches_the_loaded_session(self, load, wide_package, pinned_load, capsys):
        pinned_load(load)
        assert main(["devices", "--json", "--device", "cpu", "--model", str(wide_package)]) == 0
        shown = json.loads(capsys.readouterr().out)["choice"]
        cores = detect().cpu.physical_cores
        expected = choose_threads(HERE, cores, load, hidden_size=SMALL_HIDDEN)
        assert (shown["threads"], shown["spinning"]) == (expected.threads, False)
        assert shown["threads"] == (cores if load == 0.0 else 1)
        assert (shown["threads_why"], shown["spinning_why"]) == (expected.threads_why, expected.spinning_why)
        model = unmask.load(wide_package, device="cpu")
        assert_session_runs_with(model, shown["threads"], spinning=False)

    @pytest.mark.parametrize("load", [0.0, 50.0])
    def test_the_embedded_model_is_small_and_gets_one_thread(self, load, pinned_load, capsys):
        pinned_load(load)
        assert main(["devices", "--json", "--device", "cpu", "--model", str(default_package_dir())]) == 0
        shown = json.loads(capsys.readouterr().out)["choice"]
        cores = detect().cpu.physical_cores
        assert (shown["threads"], shown["spinning"]) == (1, False)
        if cores > 1:
            assert shown["threads_why"].startswith("hidden size 128 < 256: ops too small to split")
        assert_session_runs_with(unmask.load(device="cpu"), 1, spinning=False)

    def test_devices_table_prints_the_choice(self, pinned_load, capsys):
        pinned_load(50.0)
        assert main(["devices", "--device", "cpu"]) == 0
        out = " ".join(capsys.readouterr().out.split())  # rich wraps long lines
        assert "threads: 1 (load 50.0 keeps" in out
        assert "spinning: off (one thread has no pool to spin)" in out
        assert "50.0 (1-minute average, on the cores usable here)" in out

    def test_load_overrides_reach_the_session(self, pinned_load):
        pinned_load(50.0)  # the rule alone would give 1 thread, no spinning
        assert_session_runs_with(unmask.load(device="cpu", threads=2, spinning=True), 2, spinning=True)
        with pytest.raises(ConfigError, match="spinning must be"):
            unmask.load(device="cpu", spinning=1)


def assert_session_runs_with(model, threads: int, *, spinning: bool) -> None:
    """The model's ONNX Runtime session, read back, has these settings, and so does its decoder."""
    so = model.engine.session.get_session_options()
    assert (model.threads, so.intra_op_num_threads, model.placement.spinning) == (threads, threads, spinning)
    assert [so.get_session_config_entry(k) for k in SPIN_KEYS] == ["1" if spinning else "0"] * 2
