"""unmask.devices: profiles as data, detection parsing, selection over faked machines, a real CPU session.

Selection tests build a Detection by hand and pass a fake probe, so they describe
machines this one is not (CUDA, a Mac, Windows) without patching onnxruntime.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from unmask import ConfigError, DeviceError
from unmask.devices import (
    PROBE_MODEL,
    CpuInfo,
    Detection,
    DeviceFallbackWarning,
    GpuInfo,
    MemoryInfo,
    ProbeResult,
    candidates,
    detect,
    load_profile,
    load_profiles,
    parse_device,
    probe,
    select,
    survey,
)
from unmask.devices.detect import (
    cgroup_cpu_limit,
    cgroup_memory_limit,
    from_dict,
    normalise_arch,
    parse_nvidia_smi,
    parse_proc_cpuinfo,
    parse_sysctl,
)
from unmask.devices.profile import PROFILE_DIR, profile_from_dict
from unmask.devices.threads import choose_threads
from unmask.manifest import Dims, GraphFiles, Manifest, SpecialIds

GiB = 1 << 30
PROFILES = load_profiles()
BY_NAME = {p.name: p for p in PROFILES}


def package_manifest(precision: str = "fp32", target: str = "cpu", size_bytes: int = 100 << 20) -> Manifest:
    """A real Manifest; selection reads its precision, target and size."""
    return Manifest(architecture="llada", dims=Dims(64, 32, 2, 4, 2, 8, 128),
                    special_ids=SpecialIds(mask_id=3, eos_id=2), precision=precision, target=target, graph=GraphFiles(), size_bytes=size_bytes)


def machine(os="linux", arch="x86_64", providers=("CPUExecutionProvider",), ram=16 * GiB, cores=8, gpus=()):
    return Detection(
        os=os,
        onnxruntime_version="1.32.0",
        available_providers=tuple(providers),
        cpu=CpuInfo(model="test CPU", arch=arch, physical_cores=cores, logical_cores=2 * cores),
        memory=MemoryInfo(total_bytes=2 * ram, available_bytes=ram),
        gpus=tuple(gpus),
    )


class FakeProbe:
    """Probe that passes for the providers in `working`, and records what it was asked."""

    def __init__(self, *working: str):
        self.working = set(working) | {"CPUExecutionProvider"}
        self.calls: list[tuple[str, dict]] = []

    def __call__(self, profile, options=None):
        self.calls.append((profile.provider, dict(options or {})))
        if profile.provider in self.working:
            return ProbeResult(True, (profile.provider, "CPUExecutionProvider"))
        return ProbeResult(False, ("CPUExecutionProvider",), "libcudnn.so.9: cannot open shared object file")


# ---------------------------------------------------------------------- profiles


class TestProfiles:
    def test_one_file_per_family(self):
        assert {"cpu-x86", "cpu-arm64", "cuda", "directml", "coreml", "openvino"} <= set(BY_NAME)
        for p in PROFILES:
            assert p.applies, f"{p.name} has no 'applies' line"
            assert p.provider.endswith("ExecutionProvider")
            assert p.package.precision in p.package.precisions
            assert p.package.target in p.package.targets

    def test_directml_needs_sequential_and_no_memory_pattern(self):
        dml = BY_NAME["directml"]
        assert dml.session.mem_pattern is False
        assert dml.session.execution_mode == "sequential"
        assert "directml" in dml.names and dml.os == ("windows",)

    def test_coreml_uses_mlprogram_and_names_compute_units(self):
        options = BY_NAME["coreml"].provider_options
        assert options["ModelFormat"] == "MLProgram"
        assert options["MLComputeUnits"] in ("CPUOnly", "CPUAndGPU", "CPUAndNeuralEngine", "ALL")
        assert BY_NAME["coreml"].package.precision == "fp16"

    def test_cuda_lists_its_options(self):
        options = BY_NAME["cuda"].provider_options
        assert options["cudnn_conv_algo_search"] in ("EXHAUSTIVE", "HEURISTIC", "DEFAULT")
        assert options["enable_cuda_graph"] in ("0", "1")
        assert BY_NAME["cuda"].package.precision == "fp16" and BY_NAME["cuda"].package.target == "cuda"

    def test_cpu_profiles_split_by_architecture(self):
        assert BY_NAME["cpu-x86"].arch == ("x86_64",) and BY_NAME["cpu-arm64"].arch == ("arm64",)
        assert all(not p.cpu_fallback for p in PROFILES if p.provider == "CPUExecutionProvider")

    def test_profiles_agree_with_the_exporter(self):
        from unmask.export.config import TARGET_PRECISIONS, ExportConfig
        from unmask.manifest import PRECISIONS, TARGETS

        for p in PROFILES:  # the export command a profile recommends must be one the exporter accepts
            resolved = ExportConfig(precision=p.package.precision, target=p.package.target).resolve()
            assert (resolved.precision, resolved.target) == (p.package.precision, p.package.target)
            assert p.package.precision in TARGET_PRECISIONS[p.package.target], p.name
            assert set(p.package.precisions) <= set(PRECISIONS) and set(p.package.targets) <= set(TARGETS)

    def test_retired_attention_key_says_what_decides_instead(self, tmp_path):
        # the exporter decides the kernel from --target; a profile's attention was read by nothing
        self._refuses(tmp_path, '[package]\nattention = "mha"\n',
                      r"broken\.toml: key 'package\.attention' is no longer read.*--attention")

    def test_profile_precision_and_target_use_the_manifest_vocabulary(self, tmp_path):
        from unmask.manifest import PRECISIONS, TARGETS

        for key, allowed in (("precision", PRECISIONS), ("target", TARGETS)):
            self._refuses(tmp_path, f'[package]\n{key} = "int3"\n',
                          f"'package.{key}' = 'int3': expected one of {', '.join(allowed)}$")

    def _write(self, tmp_path, text, name="broken.toml"):
        path = tmp_path / name
        path.write_text(text)
        return path

    def _refuses(self, tmp_path, tables, match):
        """A CPU profile with `tables` appended is refused with a ConfigError matching `match`."""
        path = self._write(tmp_path, 'device = "cpu"\nprovider = "CPUExecutionProvider"\n' + tables)
        with pytest.raises(ConfigError, match=match):
            load_profile(path)

    def test_unknown_key_names_file_and_key(self, tmp_path):
        path = self._write(tmp_path, 'device = "cpu"\nprovider = "CPUExecutionProvider"\n[session]\nspinning = true\n')
        with pytest.raises(ConfigError, match=r"broken\.toml.*'session\.spinning'"):
            load_profile(path)

    def test_wrong_type_names_file_and_key(self, tmp_path):
        path = self._write(tmp_path, 'device = "cpu"\nprovider = "CPUExecutionProvider"\npriority = "high"\n')
        with pytest.raises(ConfigError, match=r"broken\.toml.*'priority' must be an integer"):
            load_profile(path)

    def test_bad_choice_names_file_and_key(self, tmp_path):
        path = self._write(tmp_path, 'device = "cpu"\nprovider = "CPUExecutionProvider"\n'
                                     '[session]\nexecution_mode = "fast"\n')
        with pytest.raises(ConfigError, match=r"broken\.toml.*'session\.execution_mode'.*sequential, parallel"):
            load_profile(path)

    def test_provider_option_values_must_be_text(self, tmp_path):
        path = self._write(tmp_path, 'device = "cuda"\nprovider = "CUDAExecutionProvider"\n'
                                     '[provider_options]\ndevice_id = 0\n')
        with pytest.raises(ConfigError, match=r"broken\.toml.*'provider_options'"):
            load_profile(path)

    def test_invalid_toml_names_file(self, tmp_path):
        path = self._write(tmp_path, "device = \n")
        with pytest.raises(ConfigError, match=r"broken\.toml: not valid TOML"):
            load_profile(path)

    def test_two_profiles_for_one_machine_are_refused(self, tmp_path):
        for name in ("cpu-x86", "cuda"):
            shutil.copy(PROFILE_DIR / f"{name}.toml", tmp_path)
        shutil.copy(PROFILE_DIR / "cuda.toml", tmp_path / "cuda-copy.toml")
        with pytest.raises(ConfigError, match="already covered by profile"):
            load_profiles(tmp_path)

    def test_defaults_make_a_valid_cpu_profile(self, tmp_path):
        p = load_profile(self._write(tmp_path, "", name="minimal.toml"))
        assert p.name == "minimal" and p.device == "cpu" and p.session.execution_mode == "sequential"


# ---------------------------------------------------------------------- detection


X86_CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Core(TM) Ultra 7 155H
flags\t\t: fpu sse4_2 avx avx2 fma f16c avx_vnni sha_ni
processor\t: 1
model name\t: Intel(R) Core(TM) Ultra 7 155H
flags\t\t: fpu sse4_2 avx avx2 fma f16c avx_vnni sha_ni
"""

ARM_CPUINFO = """processor\t: 0
BogoMIPS\t: 2000.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm asimddp i8mm bf16 sve
CPU implementer\t: 0x41
CPU part\t: 0xd4f
"""

SYSCTL = """machdep.cpu.brand_string: Apple M3 Pro
hw.optional.arm.FEAT_DotProd: 1
hw.optional.arm.FEAT_I8MM: 1
hw.optional.arm.FEAT_SME: 0
hw.optional.neon: 1
hw.optional.arm.FEAT_FP16: 1
"""


class TestDetection:
    def test_x86_cpuinfo(self):
        model, features = parse_proc_cpuinfo(X86_CPUINFO, "x86_64")
        assert model == "Intel(R) Core(TM) Ultra 7 155H"
        assert features == ("sse4_2", "avx", "avx2", "fma", "f16c", "avx_vnni")

    def test_arm64_cpuinfo(self):
        model, features = parse_proc_cpuinfo(ARM_CPUINFO, "arm64")
        assert model == "Arm CPU (part 0xd4f)"
        assert set(features) == {"neon", "dotprod", "i8mm", "fp16", "bf16", "sve"}

    def test_macos_sysctl(self):
        model, features = parse_sysctl(SYSCTL)
        assert model == "Apple M3 Pro"
        assert set(features) == {"dotprod", "i8mm", "neon", "fp16"}

    def test_nvidia_smi(self):
        (gpu,) = parse_nvidia_smi("0, NVIDIA H200, 143771, 142000\n")
        assert gpu.name == "NVIDIA H200" and gpu.memory_free_bytes == 142000 << 20

    def test_arch_names(self):
        assert normalise_arch("AMD64") == "x86_64" and normalise_arch("aarch64") == "arm64"

    def test_cgroup_limits(self, tmp_path):
        (tmp_path / "cpu.max").write_text("150000 100000\n")
        (tmp_path / "memory.max").write_text(f"{4 * GiB}\n")
        (tmp_path / "memory.current").write_text(f"{GiB}\n")
        assert cgroup_cpu_limit(tmp_path) == 2
        assert cgroup_memory_limit(tmp_path) == (4 * GiB, GiB)
        (tmp_path / "cpu.max").write_text("max 100000\n")
        (tmp_path / "memory.max").write_text("max\n")
        assert cgroup_cpu_limit(tmp_path) is None and cgroup_memory_limit(tmp_path) is None
        assert cgroup_cpu_limit(tmp_path / "missing") is None

    def test_this_machine(self):
        d = detect()
        assert "CPUExecutionProvider" in d.available_providers
        assert d.onnxruntime_version
        assert 1 <= d.cpu.physical_cores <= d.cpu.logical_cores
        assert 0 < d.memory.available_bytes <= d.memory.total_bytes
        assert from_dict(json.loads(json.dumps(d.to_dict()))) == d


# ---------------------------------------------------------------------- device names


class TestDeviceNames:
    def test_unknown_device_lists_valid_ones(self):
        with pytest.raises(DeviceError, match=r"unknown device 'tpu'.*auto.*cuda.*coreml.*dml.*directml.*cpu"):
            parse_device("tpu", PROFILES)

    def test_aliases_and_indexes(self):
        assert parse_device("DirectML", PROFILES) == ("dml", None)
        assert parse_device("cuda:1", PROFILES) == ("cuda", 1)
        assert parse_device("auto", PROFILES) == ("auto", None)

    def test_index_only_where_the_provider_takes_one(self):
        with pytest.raises(DeviceError, match="takes no index"):
            parse_device("cpu:1", PROFILES)
        with pytest.raises(DeviceError, match="must be a number"):
            parse_device("cuda:first", PROFILES)


# ---------------------------------------------------------------------- selection


class TestSelectAuto:
    def test_cuda_when_its_probe_passes(self):
        d = machine(providers=("CUDAExecutionProvider", "CPUExecutionProvider"))
        p = select(package_manifest("fp16", "cuda"), detection=d, probe=FakeProbe("CUDAExecutionProvider"))
        assert p.device == "cuda"
        assert p.provider_names == ["CUDAExecutionProvider", "CPUExecutionProvider"]
        assert p.provider_options[0]["cudnn_conv_algo_search"] == "HEURISTIC"
        assert p.notes == ()

    def test_cuda_listed_but_probe_fails_falls_back_to_cpu_with_warning(self):
        d = machine(providers=("CUDAExecutionProvider", "CPUExecutionProvider"))
        with pytest.warns(DeviceFallbackWarning, match="CUDAExecutionProvider is listed but failed its probe"):
            p = select(None, detection=d, probe=FakeProbe())
        assert p.device == "cpu" and p.profile.name == "cpu-x86"
        assert p.provider_names == ["CPUExecutionProvider"]
        assert "probe failed (libcudnn" in p.explanation

    def test_coreml_on_apple_silicon(self):
        d = machine(os="darwin", arch="arm64", providers=("CoreMLExecutionProvider", "CPUExecutionProvider"))
        p = select(package_manifest("fp16", "coreml"), detection=d, probe=FakeProbe("CoreMLExecutionProvider"))
        assert p.device == "coreml"
        assert p.providers[0] == ("CoreMLExecutionProvider", BY_NAME["coreml"].provider_options)
        assert p.providers[1][0] == "CPUExecutionProvider"

    def test_cpu_package_on_a_mac_stays_on_cpu_and_names_the_coreml_export(self):
        d = machine(os="darwin", arch="arm64", providers=("CoreMLExecutionProvider", "CPUExecutionProvider"))
        p = select(package_manifest("int4", "cpu"), detection=d, probe=FakeProbe("CoreMLExecutionProvider"))
        assert p.device == "cpu" and p.profile.name == "cpu-arm64"
        assert any("--precision fp16 --target coreml" in n for n in p.notes)

    def test_directml_on_windows(self):
        d = machine(os="windows", providers=("DmlExecutionProvider", "CPUExecutionProvider"))
        p = select(package_manifest("fp16", "dml"), detection=d, probe=FakeProbe("DmlExecutionProvider"))
        assert p.device == "dml"
        so = p.session_options()
        assert so.enable_mem_pattern is False
        assert str(so.execution_mode).endswith("ORT_SEQUENTIAL")

    def test_directml_is_never_tried_on_linux(self):
        d = machine(providers=("DmlExecutionProvider", "CPUExecutionProvider"))
        assert "directml" not in [p.name for p in candidates(d, PROFILES)]

    def test_openvino_only_by_name(self):
        d = machine(providers=("OpenVINOExecutionProvider", "CPUExecutionProvider"))
        probe = FakeProbe("OpenVINOExecutionProvider")
        assert select(None, detection=d, probe=probe).device == "cpu"
        assert select(None, "openvino", detection=d, probe=probe).device == "openvino"

    def test_too_little_ram_is_refused_naming_a_smaller_precision(self):
        d = machine(ram=4 * GiB)
        manifest = package_manifest("fp32", "cpu", size_bytes=8 * GiB)
        with pytest.raises(DeviceError, match=r"only 4\.0 GiB is free RAM; export it at int8.*--precision int8 --target cpu"):
            select(manifest, detection=d, probe=FakeProbe())

    def test_nothing_fits(self):
        d = machine(ram=1 * GiB)
        with pytest.raises(DeviceError, match="even the smallest precision would not fit"):
            select(package_manifest("fp32", "cpu", size_bytes=64 * GiB), detection=d, probe=FakeProbe())

    def test_too_big_for_the_gpu_runs_on_cpu(self):
        gpu = GpuInfo(index=0, name="small GPU", memory_total_bytes=8 * GiB, memory_free_bytes=6 * GiB)
        d = machine(providers=("CUDAExecutionProvider", "CPUExecutionProvider"), ram=64 * GiB, gpus=[gpu])
        p = select(package_manifest("fp16", "cuda", size_bytes=10 * GiB), detection=d,
                   probe=FakeProbe("CUDAExecutionProvider"))
        assert p.device == "cpu"
        assert "free on GPU 0 (small GPU)" in p.explanation
        assert any("fp16 runs slowly on cpu" in n for n in p.notes)

    def test_int4_on_x86_is_noted_as_slower_than_int8(self):
        d = machine()
        int4 = select(package_manifest("int4", "cpu"), detection=d, probe=FakeProbe())
        assert int4.device == "cpu"
        note = next(n for n in int4.notes if "int4 runs slower than int8" in n)
        assert "MatMulNBits" in note and "--precision int8" in note
        assert not any("slower" in n for n in select(package_manifest("int8", "cpu"), detection=d,
                                                    probe=FakeProbe()).notes)

    def test_slower_names_only_known_precisions(self):
        raw = {"device": "cpu", "provider": "CPUExecutionProvider", "package": {"slower": {"int3": "why"}}}
        with pytest.raises(ConfigError, match="package.slower"):
            profile_from_dict(raw, name="bad", source="bad.toml")

    def test_threads_default_to_physical_cores(self):
        d = machine(cores=6)
        assert select(None, detection=d, probe=FakeProbe()).threads == 6
        assert select(None, detection=d, probe=FakeProbe(), threads=3).threads == 3
        with pytest.raises(ConfigError):
            select(None, detection=d, probe=FakeProbe(), threads=0)

    def test_unknown_architecture_still_gets_a_cpu(self):
        d = machine(arch="riscv64")
        assert select(None, detection=d, probe=FakeProbe()).device == "cpu"


class TestSelectExplicit:
    def test_explicit_cpu_ignores_a_working_gpu(self):
        d = machine(providers=("CUDAExecutionProvider", "CPUExecutionProvider"))
        assert select(None, "cpu", detection=d, probe=FakeProbe("CUDAExecutionProvider")).device == "cpu"

    def test_provider_missing_from_build_is_refused_with_install_hint(self):
        with pytest.raises(DeviceError, match=r"needs CUDAExecutionProvider.*install: pip install onnxruntime-gpu"):
            select(None, "cuda", detection=machine(), probe=FakeProbe())

    def test_failed_probe_is_refused_with_the_reason(self):
        d = machine(providers=("CUDAExecutionProvider", "CPUExecutionProvider"))
        with pytest.raises(DeviceError, match="probe session failed: libcudnn"):
            select(None, "cuda", detection=d, probe=FakeProbe())

    def test_device_index_reaches_provider_options_and_memory_check(self):
        gpus = [GpuInfo(0, "big", memory_free_bytes=80 * GiB), GpuInfo(1, "small", memory_free_bytes=2 * GiB)]
        d = machine(providers=("CUDAExecutionProvider", "CPUExecutionProvider"), gpus=gpus)
        probe = FakeProbe("CUDAExecutionProvider")
        manifest = package_manifest("fp16", "cuda", size_bytes=4 * GiB)
        p = select(manifest, "cuda:0", detection=d, probe=probe)
        assert p.device_index == 0 and p.provider_options[0]["device_id"] == "0"
        with pytest.raises(DeviceError, match=r"free on GPU 1 \(small\); export it at int4"):
            select(manifest, "cuda:1", detection=d, probe=probe)
        assert probe.calls[-1] == ("CUDAExecutionProvider", {**BY_NAME["cuda"].provider_options, "device_id": "1"})

    def test_mismatched_package_runs_with_the_export_command(self, caplog):
        d = machine(providers=("CUDAExecutionProvider", "CPUExecutionProvider"))
        p = select(package_manifest("int8", "cpu"), "cuda", detection=d, probe=FakeProbe("CUDAExecutionProvider"))
        assert p.device == "cuda"
        assert "unmask export HF_DIR OUT_DIR --precision fp16 --target cuda" in p.notes[0]
        assert "--target cuda" in caplog.text

    def test_device_not_for_this_machine(self):
        with pytest.raises(DeviceError, match=r"'coreml' does not apply to this machine \(linux/x86_64\): Apple"):
            select(None, "coreml", detection=machine(), probe=FakeProbe())


# ---------------------------------------------------------------------- real onnxruntime


class TestRealSession:
    def test_probe_model_is_the_documented_graph(self):
        onnx = pytest.importorskip("onnx")
        from onnx import TensorProto, helper

        model = onnx.load_from_string(PROBE_MODEL)
        onnx.checker.check_model(model)
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
        graph = helper.make_graph([helper.make_node("Add", ["x", "x"], ["y"])], "probe", [x], [y])
        expected = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="unmask.devices")
        expected.ir_version = 8
        assert model == expected

    def test_cpu_probe_passes_and_missing_provider_fails_without_raising(self):
        assert probe(BY_NAME["cpu-x86"]).ok
        result = probe(BY_NAME["coreml"])  # not in this (Linux) build
        assert not result.ok and "CoreMLExecutionProvider" in result.reason

    def test_select_create_session_and_run(self):
        here = detect()
        placement = select(None, "cpu", detection=here)
        expected = choose_threads(BY_NAME["cpu-x86" if here.cpu.arch == "x86_64" else "cpu-arm64"],
                                  here.cpu.physical_cores, here.cpu.load)
        assert placement.device == "cpu" and (placement.threads, placement.spinning) == (expected.threads,
                                                                                         expected.spinning)
        session = placement.create_session(_matmul_model())
        assert session.get_providers() == ["CPUExecutionProvider"]
        x = np.arange(6, dtype=np.float32).reshape(2, 3)
        (y,) = session.run(None, {"x": x})
        np.testing.assert_allclose(y, x @ np.full((3, 2), 0.5, np.float32))
        so = placement.session_options()
        assert so.intra_op_num_threads == placement.threads
        assert so.get_session_config_entry("session.intra_op.allow_spinning") == str(int(placement.spinning))
        stop = placement.profile.session.stop_spinning_after_run
        assert so.get_session_config_entry("session.force_spinning_stop") == str(int(stop))

    def test_session_from_bytes_keeps_no_second_copy_of_the_graph(self, tmp_path):
        placement = select(None, "cpu")
        model = _matmul_model()
        session = placement.create_session(model)
        # onnxruntime's InferenceSession would keep the bytes for a provider fallback; they are dropped,
        # and the fallback with them, while the session still runs on the weights it copied
        assert session._model_bytes is None and session._enable_fallback is False
        x = np.ones((1, 3), np.float32)
        np.testing.assert_allclose(session.run(None, {"x": x})[0], [[1.5, 1.5]])
        path = tmp_path / "tiny.onnx"
        path.write_bytes(model)
        by_path = placement.create_session(path)  # nothing held: ORT read the file itself
        assert by_path._model_bytes is None and by_path._enable_fallback is True

    def test_spinning_policy_reaches_the_session_options(self):
        d = machine(arch="x86_64")
        assert not select(None, "cpu", detection=d).spinning  # measured: spinning ran 0.2-0.8x of the best setting
        for allow, stop in ((False, False), (True, True)):
            placement = select(None, "cpu", detection=d, spinning=allow)
            so = placement.with_session(stop_spinning_after_run=stop).session_options()
            for key in ("session.intra_op.allow_spinning", "session.inter_op.allow_spinning"):
                assert so.get_session_config_entry(key) == ("1" if allow else "0")
            assert so.get_session_config_entry("session.force_spinning_stop") == ("1" if stop else "0")

    def test_survey_of_this_machine(self):
        rows = {r.profile.name: r for r in survey(detect(), PROFILES)}
        assert rows["cpu-x86" if detect().cpu.arch == "x86_64" else "cpu-arm64"].probe.ok


def _matmul_model() -> bytes:
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.full((3, 2), 0.5, np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 2])],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


# ---------------------------------------------------------------------- CLI


class TestCli:
    def run(self, *args):
        from click.testing import CliRunner

        from unmask.cli import cli

        return CliRunner().invoke(cli, ["devices", *args])

    def test_json(self):
        result = self.run("--json")
        assert result.exit_code == 0, result.output
        out = json.loads(result.output)
        assert out["choice"]["device"] == "cpu" and out["error"] is None
        assert {r["name"] for r in out["profiles"]} >= {"cuda", "coreml", "directml", "cpu-x86"}

    def test_table(self):
        result = self.run()
        assert result.exit_code == 0, result.output
        assert "Device profiles" in result.output and "chosen:" in result.output

    def test_unknown_device_fails_before_any_table(self):
        result = self.run("--device", "tpu", "--json")
        assert isinstance(result.exception, DeviceError)
        assert "valid devices: auto" in str(result.exception)
        assert result.output == ""

    def test_model_too_big(self, tmp_path):
        from unmask.manifest import Dims, GraphFiles, Manifest, SpecialIds, write_manifest

        manifest = Manifest(
            architecture="llada",
            dims=Dims(64, 32, 2, 4, 2, 8, 128),
            special_ids=SpecialIds(mask_id=3, eos_id=2),
            precision="fp32",
            target="cpu",
            graph=GraphFiles(),
            size_bytes=1 << 50,
        )
        write_manifest(manifest, tmp_path)
        result = self.run("--model", str(tmp_path), "--json")
        assert isinstance(result.exception, DeviceError)
        assert "even the smallest precision" in json.loads(result.output)["error"]
