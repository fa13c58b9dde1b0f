"""What this machine offers: providers in the onnxruntime build, CPU, memory, GPUs.

`detect()` gathers the facts once into a frozen `Detection`; selection is pure
functions over it, so tests build a Detection by hand instead of patching
onnxruntime. Parsing (`/proc/cpuinfo`, `sysctl`) is split from reading so it can be
tested on text from other machines.
"""

from __future__ import annotations

import math
import os
import platform
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping

# x86 /proc/cpuinfo flags worth showing (what MLAS dispatches on), in display order.
_X86_FLAGS = (
    "sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx_vnni",
    "avx512_bf16", "avx512_fp16", "amx_tile", "amx_int8", "amx_bf16",
)
# arm64 Linux hwcaps -> the names unmask shows (the ones ORT's arm64 kernels use).
_ARM_FLAGS = {"asimd": "neon", "asimddp": "dotprod", "i8mm": "i8mm", "asimdhp": "fp16", "bf16": "bf16",
              "sve": "sve", "sve2": "sve2", "sme": "sme"}
# macOS `sysctl hw.optional` keys -> the same names.
_SYSCTL_FLAGS = {
    "hw.optional.neon": "neon", "hw.optional.arm.FEAT_DotProd": "dotprod", "hw.optional.arm.FEAT_I8MM": "i8mm",
    "hw.optional.arm.FEAT_FP16": "fp16", "hw.optional.arm.FEAT_BF16": "bf16", "hw.optional.arm.FEAT_SME": "sme",
    "hw.optional.avx2_0": "avx2", "hw.optional.avx512f": "avx512f", "hw.optional.avx512vnni": "avx512_vnni",
    "hw.optional.fma": "fma",
}
# Windows IsProcessorFeaturePresent ids -> names.
_WINDOWS_FLAGS = {39: "avx", 40: "avx2", 41: "avx512f", 43: "dotprod", 19: "neon"}


@dataclass(frozen=True)
class CpuInfo:
    model: str = "unknown CPU"
    arch: str = "x86_64"  # normalised: x86_64 | arm64 | whatever platform.machine() said
    features: tuple[str, ...] = ()  # instruction-set extensions, normalised names (avx2, avx512_vnni, dotprod ...)
    physical_cores: int = 1  # cores this process may use, hyper-threads not counted
    logical_cores: int = 1  # hardware threads this process may use
    # 1-minute load average scaled to those threads (runnable tasks per usable share of the machine);
    # None where the OS keeps none (Windows). The thread count depends on it (devices/threads.py)
    load: float | None = None


@dataclass(frozen=True)
class MemoryInfo:
    total_bytes: int = 0
    available_bytes: int = 0  # what a new allocation can get without swapping (cgroup limit included)


@dataclass(frozen=True)
class EpDevice:
    """One entry of onnxruntime.get_ep_devices(): a provider bound to a hardware device."""

    ep_name: str
    ep_vendor: str = ""
    device_type: str = "CPU"  # CPU | GPU | NPU
    vendor: str = ""
    vendor_id: int = 0
    device_id: int = 0
    metadata: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class GpuInfo:
    """A GPU as its driver or provider reports it; memory is None when nobody said."""

    index: int
    name: str
    vendor: str = ""
    memory_total_bytes: int | None = None
    memory_free_bytes: int | None = None
    source: str = ""  # where the numbers came from (nvidia-smi, get_ep_devices)


@dataclass(frozen=True)
class Detection:
    """Everything selection needs to know about this machine."""

    os: str = "linux"  # linux | windows | darwin
    onnxruntime_version: str = ""
    available_providers: tuple[str, ...] = ("CPUExecutionProvider",)
    ep_devices: tuple[EpDevice, ...] = ()
    cpu: CpuInfo = field(default_factory=CpuInfo)
    memory: MemoryInfo = field(default_factory=MemoryInfo)
    gpus: tuple[GpuInfo, ...] = ()
    problems: tuple[str, ...] = ()  # what could not be read, one line each

    def gpu(self, index: int) -> GpuInfo | None:
        return next((g for g in self.gpus if g.index == index), None)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ---------------------------------------------------------------------- detect


def detect() -> Detection:
    """Read this machine. Never raises for a missing fact: it lands in `problems`."""
    problems: list[str] = []
    os_name = _os_name()
    version, providers, ep_devices = _onnxruntime_facts(problems)
    cpu = _cpu_info(os_name, problems)
    memory = _memory_info(problems)
    gpus = _gpus(providers, ep_devices, problems)
    return Detection(
        os=os_name,
        onnxruntime_version=version,
        available_providers=providers,
        ep_devices=ep_devices,
        cpu=cpu,
        memory=memory,
        gpus=gpus,
        problems=tuple(problems),
    )


def _os_name() -> str:
    if sys.platform.startswith("linux"):
        return "linux"
    if sys.platform == "darwin":
        return "darwin"
    if sys.platform in ("win32", "cygwin"):
        return "windows"
    return sys.platform


def normalise_arch(machine: str) -> str:
    m = machine.lower()
    if m in ("x86_64", "amd64", "x64"):
        return "x86_64"
    if m in ("arm64", "aarch64", "armv8", "arm64e"):
        return "arm64"
    return m or "unknown"


def _onnxruntime_facts(problems: list[str]) -> tuple[str, tuple[str, ...], tuple[EpDevice, ...]]:
    try:
        import onnxruntime as ort
    except Exception as exc:  # a broken wheel must not stop `unmask devices` from saying so
        problems.append(f"onnxruntime failed to import: {exc}")
        return "", (), ()
    providers = tuple(ort.get_available_providers())
    devices: tuple[EpDevice, ...] = ()
    if hasattr(ort, "get_ep_devices"):  # onnxruntime >= 1.22
        try:
            devices = tuple(_ep_device(d) for d in ort.get_ep_devices())
        except Exception as exc:
            problems.append(f"onnxruntime.get_ep_devices() failed: {exc}")
    return ort.__version__, providers, devices


def _ep_device(d: Any) -> EpDevice:
    hw = d.device
    kind = getattr(hw.type, "name", str(hw.type))
    return EpDevice(
        ep_name=d.ep_name,
        ep_vendor=d.ep_vendor,
        device_type=kind,
        vendor=hw.vendor,
        vendor_id=int(hw.vendor_id),
        device_id=int(hw.device_id),
        metadata={str(k): str(v) for k, v in dict(hw.metadata).items()},
    )


# ---------------------------------------------------------------------- CPU


def _cpu_info(os_name: str, problems: list[str]) -> CpuInfo:
    arch = normalise_arch(platform.machine())
    model, features = "", ()
    try:
        if os_name == "linux" and Path("/proc/cpuinfo").is_file():
            model, features = parse_proc_cpuinfo(Path("/proc/cpuinfo").read_text(errors="replace"), arch)
        elif os_name == "darwin":
            model, features = parse_sysctl(_run(["sysctl", "machdep.cpu.brand_string", "hw.optional"]))
        elif os_name == "windows":
            model, features = platform.processor(), _windows_features()
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        problems.append(f"CPU features unreadable: {exc}")
    logical, physical = _core_counts()
    return CpuInfo(
        model=model or platform.processor() or "unknown CPU",
        arch=arch,
        features=features,
        physical_cores=physical,
        logical_cores=logical,
        load=load_average(logical),
    )


def parse_proc_cpuinfo(text: str, arch: str) -> tuple[str, tuple[str, ...]]:
    """(model name, normalised features) from Linux /proc/cpuinfo text of an x86 or arm64 CPU."""
    model, flags = "", set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key in ("model name", "hardware", "cpu model") and not model:
            model = value.strip()
        elif key in ("flags", "features") and not flags:
            flags = set(value.split())
    if arch == "arm64":
        if not model:
            model = _arm_model(text)
        return model, tuple(name for hw, name in _ARM_FLAGS.items() if hw in flags)
    return model, tuple(f for f in _X86_FLAGS if f in flags)


def _arm_model(text: str) -> str:
    """arm64 /proc/cpuinfo rarely has a model name; name the implementer/part instead."""
    implementers = {"0x41": "Arm", "0x51": "Qualcomm", "0x61": "Apple", "0x4e": "NVIDIA", "0x48": "HiSilicon",
                    "0xc0": "Ampere"}
    fields_: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        fields_.setdefault(key.strip().lower(), value.strip())
    vendor = implementers.get(fields_.get("cpu implementer", ""), "arm64")
    part = fields_.get("cpu part", "")
    return f"{vendor} CPU (part {part})" if part else f"{vendor} CPU"


def parse_sysctl(text: str) -> tuple[str, tuple[str, ...]]:
    """(model, features) from `sysctl machdep.cpu.brand_string hw.optional` output on macOS."""
    model, found = "", []
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if key == "machdep.cpu.brand_string":
            model = value
        elif key in _SYSCTL_FLAGS and value == "1" and _SYSCTL_FLAGS[key] not in found:
            found.append(_SYSCTL_FLAGS[key])
    return model, tuple(found)


def _windows_features() -> tuple[str, ...]:
    import ctypes

    present = ctypes.windll.kernel32.IsProcessorFeaturePresent  # type: ignore[attr-defined]
    return tuple(name for pf, name in _WINDOWS_FLAGS.items() if present(pf))


def _core_counts() -> tuple[int, int]:
    """(logical, physical) cores this process may use: affinity and cgroup quota included."""
    import psutil

    logical_host = psutil.cpu_count(logical=True) or os.cpu_count() or 1
    physical_host = psutil.cpu_count(logical=False) or logical_host
    usable = logical_host
    if hasattr(os, "sched_getaffinity"):
        usable = len(os.sched_getaffinity(0)) or usable
    quota = cgroup_cpu_limit()
    if quota is not None:
        usable = min(usable, quota)
    threads_per_core = max(1, logical_host // max(1, physical_host))
    physical = max(1, min(physical_host, math.ceil(usable / threads_per_core)))
    return max(1, usable), physical


def load_average(logical: int) -> float | None:
    """The 1-minute load average times the share of the machine's hardware threads this process may use.

    The kernel counts runnable tasks over the whole machine (a container sees its host's), so
    a process limited to 2 of 16 threads expects 1/8 of them on its cores.
    """
    try:
        one_minute = os.getloadavg()[0]
    except (AttributeError, OSError):  # Windows has no load average
        return None
    return one_minute * logical / max(logical, os.cpu_count() or logical)


def cgroup_cpu_limit(root: str | Path = "/sys/fs/cgroup") -> int | None:
    """CPUs allowed by a cgroup v2 quota (`cpu.max`), rounded up; None when unlimited or unknown."""
    try:
        quota, period = (Path(root) / "cpu.max").read_text().split()[:2]
    except (OSError, ValueError):
        return None
    if quota == "max":
        return None
    return max(1, math.ceil(int(quota) / int(period)))


# ---------------------------------------------------------------------- memory


def _memory_info(problems: list[str]) -> MemoryInfo:
    import psutil

    vm = psutil.virtual_memory()
    total, available = int(vm.total), int(vm.available)
    limit = cgroup_memory_limit()
    if limit is not None:
        total_limit, used = limit
        total = min(total, total_limit)
        available = min(available, max(0, total_limit - used))
    return MemoryInfo(total_bytes=total, available_bytes=available)


def cgroup_memory_limit(root: str | Path = "/sys/fs/cgroup") -> tuple[int, int] | None:
    """(limit, current usage) of a cgroup v2 memory limit; None when unlimited or unknown."""
    try:
        limit = (Path(root) / "memory.max").read_text().strip()
        current = int((Path(root) / "memory.current").read_text().strip())
    except (OSError, ValueError):
        return None
    if limit == "max":
        return None
    return int(limit), current


# ---------------------------------------------------------------------- GPUs


def _gpus(providers: tuple[str, ...], ep_devices: tuple[EpDevice, ...], problems: list[str]) -> tuple[GpuInfo, ...]:
    if "CUDAExecutionProvider" in providers and shutil.which("nvidia-smi"):
        try:
            return parse_nvidia_smi(_run([
                "nvidia-smi", "--query-gpu=index,name,memory.total,memory.free", "--format=csv,noheader,nounits",
            ]))
        except (OSError, subprocess.SubprocessError, ValueError) as exc:
            problems.append(f"nvidia-smi failed: {exc}")
    # what the providers report: GPU/NPU entries of get_ep_devices(), numbered per provider
    gpus, seen = [], {}
    for d in ep_devices:
        if d.device_type == "CPU":
            continue
        index = seen[d.ep_name] = seen.get(d.ep_name, -1) + 1
        name = d.metadata.get("Description") or d.metadata.get("DeviceName") or f"{d.vendor} {d.device_type}"
        gpus.append(GpuInfo(index=index, name=name, vendor=d.vendor, source=f"get_ep_devices ({d.ep_name})"))
    return tuple(gpus)


def parse_nvidia_smi(text: str) -> tuple[GpuInfo, ...]:
    """GpuInfo rows from `nvidia-smi --query-gpu=index,name,memory.total,memory.free --format=csv,noheader,nounits`."""
    gpus = []
    for line in text.strip().splitlines():
        index, name, total, free = (part.strip() for part in line.split(","))
        gpus.append(GpuInfo(
            index=int(index), name=name, vendor="NVIDIA",
            memory_total_bytes=int(float(total)) << 20, memory_free_bytes=int(float(free)) << 20,
            source="nvidia-smi",
        ))
    return tuple(gpus)


def _run(cmd: list[str]) -> str:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=5, check=True).stdout


def from_dict(raw: Mapping[str, Any]) -> Detection:
    """Rebuild a Detection from `to_dict()` output (saved detections, tests)."""
    return Detection(
        os=raw["os"],
        onnxruntime_version=raw.get("onnxruntime_version", ""),
        available_providers=tuple(raw.get("available_providers", ())),
        ep_devices=tuple(EpDevice(**d) for d in raw.get("ep_devices", ())),
        cpu=CpuInfo(**{**raw.get("cpu", {}), "features": tuple(raw.get("cpu", {}).get("features", ()))}),
        memory=MemoryInfo(**raw.get("memory", {})),
        gpus=tuple(GpuInfo(**g) for g in raw.get("gpus", ())),
        problems=tuple(raw.get("problems", ())),
    )
