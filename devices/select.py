"""Selection: which profile runs a model here, with what options, and why.

`select(manifest, device)` is a few small pure steps over (Detection, profiles,
manifest) plus one injected `probe`: parse the device name, find the profile,
confirm its provider with a probe session, check the package fits in free memory,
and say what export would suit the device better. Tests pass a hand-built
Detection and a fake probe; nothing here patches onnxruntime.
"""

from __future__ import annotations

import logging
import math
import warnings
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

from ..config import check_threads
from ..errors import ConfigError, DeviceError
from ..manifest import Manifest
from .detect import Detection, detect
from .probe import Probe, ProbeResult, probe as run_probe
from .profile import DeviceProfile, load_profiles
from .threads import ThreadChoice, choose_threads

logger = logging.getLogger(__name__)

# Approximate bytes per weight of each precision (int4: 4 bits + an fp32 scale and a 4-bit zero point per
# 128-block, with room for the 8-bit LM head).
PRECISION_BYTES = {"fp32": 4.0, "fp16": 2.0, "int8": 1.0, "int4": 0.5625}
EXPORT_COMMAND = "unmask export HF_DIR OUT_DIR --precision {precision} --target {target}"


class DeviceFallbackWarning(UserWarning):
    """A provider the wheel lists failed its probe, so a slower device was chosen."""


@dataclass(frozen=True)
class Placement:
    """Everything the runtime needs to build an onnxruntime.InferenceSession on the chosen device."""

    device: str  # user-facing device name: cpu | cuda | dml | coreml | openvino
    profile: DeviceProfile
    providers: tuple[tuple[str, dict[str, str]], ...]  # (provider, options), best first; ORT accepts this list
    threads: int  # intra-op threads for ORT, and the C++ decoder's thread count
    explanation: str  # a few lines for humans: what was chosen and why
    spinning: bool = False  # ORT's idle pool threads spin-wait (intra- and inter-op); devices/threads.py decides
    threads_why: str = ""  # one line each: why this many threads, why (not) spinning
    spinning_why: str = ""
    notes: tuple[str, ...] = ()  # advice that did not change the choice (better export, memory, fallbacks)
    device_index: int | None = None  # GPU / adapter index when the provider has one
    probe: ProbeResult | None = None

    @property
    def provider_names(self) -> list[str]:
        return [name for name, _ in self.providers]

    @property
    def provider_options(self) -> list[dict[str, str]]:
        return [dict(options) for _, options in self.providers]

    def with_session(self, **changes: Any) -> "Placement":
        """This placement with some of its profile's session settings changed (benchmarks, tests).

        Threads and spinning are the placement's own (select(threads=, spinning=)), not the profile's.
        """
        session = replace(self.profile.session, **changes)
        return replace(self, profile=replace(self.profile, session=session))

    def session_options(self) -> Any:
        """A fresh onnxruntime.SessionOptions configured from the profile (SessionOptions is mutable: one per session)."""
        import onnxruntime as ort

        s = self.profile.session
        so = ort.SessionOptions()
        so.intra_op_num_threads = self.threads
        so.execution_mode = {
            "sequential": ort.ExecutionMode.ORT_SEQUENTIAL,
            "parallel": ort.ExecutionMode.ORT_PARALLEL,
        }[s.execution_mode]
        so.graph_optimization_level = {
            "disabled": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
            "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
            "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
            "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
        }[s.graph_optimization]
        so.enable_cpu_mem_arena = s.cpu_mem_arena
        so.enable_mem_pattern = s.mem_pattern
        spin = "1" if self.spinning else "0"
        so.add_session_config_entry("session.intra_op.allow_spinning", spin)
        so.add_session_config_entry("session.inter_op.allow_spinning", spin)
        so.add_session_config_entry("session.force_spinning_stop", "1" if s.stop_spinning_after_run else "0")
        for key, value in s.config_entries.items():
            so.add_session_config_entry(key, value)
        return so

    def create_session(self, model: Any, sess_options: Any = None,
                       external_data: Mapping[str, bytes] | None = None) -> Any:
        """onnxruntime.InferenceSession(model) on this placement (`model`: path or serialized bytes).

        external_data: {location: contents} of a bytes model's external-data files; ORT then reads
        no file at all (a location missing from it fails) and copies the bytes during this call.
        """
        import onnxruntime as ort

        so = sess_options if sess_options is not None else self.session_options()
        if external_data:
            names = list(external_data)
            buffers = [external_data[n] for n in names]
            so.add_external_initializers_from_files_in_memory(names, buffers, [len(b) for b in buffers])
        session = ort.InferenceSession(
            model if isinstance(model, bytes) else str(model),
            sess_options=so,
            providers=self.provider_names,
            provider_options=self.provider_options,
        )
        if isinstance(model, bytes):
            release_model_bytes(session)
        return session

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "device_index": self.device_index,
            "profile": self.profile.name,
            "providers": [[name, options] for name, options in self.providers],
            "threads": self.threads,
            "threads_why": self.threads_why,
            "spinning": self.spinning,
            "spinning_why": self.spinning_why,
            "explanation": self.explanation,
            "notes": list(self.notes),
        }


def release_model_bytes(session: Any) -> None:
    """Drop the graph bytes onnxruntime's Python InferenceSession keeps after creating the session.

    It holds them (`_model_bytes`) only to rebuild the session when a provider fails at run time
    and it falls back to another one; ORT has parsed and copied the weights by then, so the bytes
    are a second copy of the graph for the session's lifetime (a 0.13B int4 package of 115 MiB:
    RSS after load 327 MiB kept, 231 MiB released; benchmarks/bench_quant.py). The fallback goes
    with them: a provider that fails at run time raises instead of re-running on the CPU.
    """
    if getattr(session, "_model_bytes", None) is not None:
        session.disable_fallback()
        session._model_bytes = None


# ---------------------------------------------------------------------- entry point


def select(
    manifest: Manifest | None = None,
    device: str = "auto",
    *,
    detection: Detection | None = None,
    profiles: Sequence[DeviceProfile] | None = None,
    probe: Probe | None = None,
    threads: int | None = None,
    spinning: bool | None = None,
) -> Placement:
    """Pick the device for `manifest` (a unmask.manifest.Manifest, or None to pick for no model).

    device: "auto", or a device name (cpu, cuda, dml/directml, coreml, openvino), optionally
    with an index ("cuda:1"). An explicit device is used or refused with the reason (DeviceError);
    auto takes the best device whose probe passes, warning (DeviceFallbackWarning) when a listed
    provider failed. A package that does not fit in free memory is refused before loading.
    threads / spinning override devices/threads.py's choice (None: its rule).
    """
    detection = detection if detection is not None else detect()
    profiles = tuple(profiles) if profiles is not None else load_profiles()
    probe = probe if probe is not None else run_probe
    check_threads(threads)
    if spinning is not None and not isinstance(spinning, bool):
        raise ConfigError(f"spinning must be True, False or None (the device profile's rule), got {spinning!r}")
    asked = (threads, spinning)
    name, index = parse_device(device, profiles)
    if name == "auto":
        return _select_auto(manifest, detection, profiles, probe, asked)
    return _select_explicit(name, index, manifest, detection, profiles, probe, asked)


def device_names(profiles: Sequence[DeviceProfile]) -> list[str]:
    """Every name `--device` accepts ("auto" first), aliases in parentheses-free form."""
    names = ["auto"]
    for p in sorted(profiles, key=lambda p: -p.priority):
        names += [n for n in p.names if n not in names]
    return names


def parse_device(device: str, profiles: Sequence[DeviceProfile]) -> tuple[str, int | None]:
    """'cuda:1' -> ('cuda', 1); aliases -> the canonical name; unknown names list the valid ones."""
    if not isinstance(device, str) or not device.strip():
        raise DeviceError(f"device {device!r}: expected one of {', '.join(device_names(profiles))}")
    text = device.strip().lower()
    name, _, index_text = text.partition(":")
    if name == "auto" and not index_text:
        return "auto", None
    profile = next((p for p in profiles if name in p.names), None)
    if profile is None:
        raise DeviceError(f"unknown device {device!r}; valid devices: {', '.join(device_names(profiles))}")
    if not index_text:
        return profile.device, None
    if profile.device_index_option is None:
        raise DeviceError(f"device {device!r}: {profile.device} takes no index (use '{profile.device}')")
    if not index_text.isdigit():
        raise DeviceError(f"device {device!r}: the index after ':' must be a number, e.g. '{profile.device}:0'")
    return profile.device, int(index_text)


# ---------------------------------------------------------------------- explicit


def _select_explicit(name, index, manifest, detection, profiles, probe, asked) -> Placement:
    profile, notes = profile_for(name, detection, profiles)
    if profile.provider not in detection.available_providers:
        have = ", ".join(p.replace("ExecutionProvider", "") for p in detection.available_providers) or "none"
        hint = f"; install: {profile.install}" if profile.install else ""
        raise DeviceError(
            f"device {name!r} needs {profile.provider}, which this onnxruntime build "
            f"({detection.onnxruntime_version or 'unknown version'}) does not have (it has: {have}){hint}"
        )
    options = provider_options(profile, index)
    result = probe(profile, options)
    if not result.ok:
        raise DeviceError(f"device {name!r}: {profile.provider} is listed but its probe session failed: {result.reason}")
    problem = memory_problem(profile, manifest, detection, index)
    if problem:
        raise DeviceError(problem)
    notes += package_notes(profile, manifest)
    head = f"{name}: asked for by name; {profile.provider} confirmed by a probe session"
    return _placement(profile, index, options, result, detection, manifest, asked, head, notes)


def profile_for(name: str, detection: Detection, profiles: Sequence[DeviceProfile]) -> tuple[DeviceProfile, list[str]]:
    """The profile of device `name` that applies to this machine (OS, CPU architecture)."""
    family = [p for p in profiles if p.device == name]
    here = [p for p in family if p.applies_to(detection.os, detection.cpu.arch)]
    if here:
        return max(here, key=lambda p: p.priority), []
    machine = f"{detection.os}/{detection.cpu.arch}"
    available = [p for p in family if p.provider in detection.available_providers]
    if available:  # the provider is here even though no profile was written for this machine
        p = available[0]
        return p, [f"profile {p.name} is written for {_where(p)}, not {machine}; using it anyway"]
    applies = "; ".join(p.applies for p in family if p.applies)
    raise DeviceError(f"device {name!r} does not apply to this machine ({machine}): {applies}")


def _where(p: DeviceProfile) -> str:
    return f"{'/'.join(p.os) or 'any OS'} on {'/'.join(p.arch) or 'any CPU'}"


# ---------------------------------------------------------------------- auto


def candidates(detection: Detection, profiles: Sequence[DeviceProfile]) -> list[DeviceProfile]:
    """Profiles auto may try on this machine, best first; a CPU profile always comes last."""
    here = [p for p in profiles if p.auto and p.applies_to(detection.os, detection.cpu.arch)]
    if not any(p.provider == "CPUExecutionProvider" for p in here):
        cpu = [p for p in profiles if p.provider == "CPUExecutionProvider"]
        if not cpu:
            raise ConfigError("no CPU device profile is installed (devices/profiles/cpu-*.toml)")
        here.append(cpu[0])
    return sorted(here, key=lambda p: -p.priority)


def _select_auto(manifest, detection, profiles, probe, asked) -> Placement:
    passed_over: list[str] = []  # why each better device was not taken
    failed_probe: list[tuple[DeviceProfile, str]] = []
    too_big: list[str] = []
    notes: list[str] = []
    for profile in candidates(detection, profiles):
        if profile.provider not in detection.available_providers:
            passed_over.append(f"{profile.device}: {profile.provider} is not in this onnxruntime build")
            continue
        target = manifest.target if manifest is not None else None
        if manifest is not None and target not in profile.package.targets:
            passed_over.append(f"{profile.device}: the package was exported for {target}")
            notes.append(
                f"{profile.device} is in this onnxruntime build but the package was exported for {target}; a package for it: "
                f"`{export_command(profile)}`"
            )
            continue
        options = provider_options(profile, None)
        result = probe(profile, options)
        if not result.ok:
            passed_over.append(f"{profile.device}: probe failed ({result.reason})")
            failed_probe.append((profile, result.reason))
            continue
        problem = memory_problem(profile, manifest, detection, None)
        if problem:
            passed_over.append(f"{profile.device}: {problem}")
            too_big.append(problem)
            continue
        for failed, reason in failed_probe:
            warnings.warn(
                f"{failed.provider} is listed but failed its probe ({reason}); running on {profile.device}",
                DeviceFallbackWarning,
                stacklevel=3,
            )
        notes += package_notes(profile, manifest)
        head = f"{profile.device}: best available device, {profile.provider} confirmed by a probe session"
        if passed_over:
            head += "\n  passed over: " + "\n  passed over: ".join(passed_over)
        return _placement(profile, None, options, result, detection, manifest, asked, head, notes)
    if too_big:
        raise DeviceError(too_big[-1])
    raise DeviceError("no device can run here: " + "; ".join(passed_over))


# ---------------------------------------------------------------------- checks


def provider_options(profile: DeviceProfile, index: int | None) -> dict[str, str]:
    options = dict(profile.provider_options)
    if index is not None and profile.device_index_option:
        options[profile.device_index_option] = str(index)
    return options


def memory_problem(profile: DeviceProfile, manifest: Manifest | None, detection: Detection,
                   index: int | None) -> str | None:
    """Why the package does not fit in free memory (naming a smaller precision), or None if it fits."""
    size = manifest.size_bytes if manifest is not None else 0
    free, where = free_memory(profile, detection, index)
    if not size or free is None:
        return None
    needed = math.ceil(size * profile.memory_factor)
    if needed <= free:
        return None
    precision = manifest.precision
    msg = (
        f"the model needs ~{gib(needed)} ({gib(size)} of graph files x{profile.memory_factor:g}) "
        f"but only {gib(free)} is {where}"
    )
    smaller = smaller_precision(size, precision, free, profile)
    if smaller is not None:
        q, est = smaller
        command = EXPORT_COMMAND.format(precision=q, target=profile.package.target)
        return f"{msg}; export it at {q} (~{gib(est)}): `{command}`"
    return f"{msg}; even the smallest precision would not fit: free memory or use a bigger machine"


def free_memory(profile: DeviceProfile, detection: Detection, index: int | None) -> tuple[int | None, str]:
    """(free bytes, where) for the memory the profile's weights live in; (None, ...) when unknown."""
    if profile.memory == "device":
        option = profile.provider_options.get(profile.device_index_option or "", "0")
        gpu = detection.gpu(index if index is not None else int(option) if option.isdigit() else 0)
        if gpu is not None and gpu.memory_free_bytes is not None:
            return gpu.memory_free_bytes, f"free on GPU {gpu.index} ({gpu.name})"
    available = detection.memory.available_bytes
    return (available if available > 0 else None), "free RAM"


def smaller_precision(size: int, precision: str, free: int, profile: DeviceProfile) -> tuple[str, int] | None:
    """The largest precision below `precision` whose estimated size fits `free` (profile's precisions first)."""
    current = PRECISION_BYTES.get(precision, 4.0)
    ladder = sorted((q for q in PRECISION_BYTES if PRECISION_BYTES[q] < current), key=lambda q: -PRECISION_BYTES[q])
    preferred = [q for q in ladder if q in profile.package.precisions] + [q for q in ladder if q not in profile.package.precisions]
    for q in preferred:
        estimate = math.ceil(size * PRECISION_BYTES[q] / current)
        if estimate * profile.memory_factor <= free:
            return q, estimate
    return None


def package_notes(profile: DeviceProfile, manifest: Manifest | None) -> list[str]:
    """Advice when the package's precision or target does not suit the profile (it still runs)."""
    if manifest is None:
        return []
    notes = []
    precision, target = manifest.precision, manifest.target
    if target not in profile.package.targets:
        notes.append(
            f"this package was exported for {target}, not {profile.device}; some ops may fall back to CPU. "
            f"For {profile.device}: `{export_command(profile)}`"
        )
    elif precision not in profile.package.precisions:
        notes.append(
            f"{precision} runs slowly on {profile.device} ({profile.name} suits {', '.join(profile.package.precisions)}); "
            f"better: `{export_command(profile)}`"
        )
    elif precision in profile.package.slower:
        notes.append(f"{precision} runs slower than {profile.package.precision} on this {profile.device}: "
                     f"{profile.package.slower[precision]}. For speed: `{export_command(profile)}`")
    op = moe_op(manifest)
    if op not in (None, "dense") and op not in profile.moe_ops:
        notes.append(f"the experts of this mixture-of-experts package are com.microsoft {op} nodes, which "
                     f"{profile.provider} does not run ({profile.name} moe_ops: {', '.join(profile.moe_ops) or 'none'}); "
                     f"ONNX Runtime places them on the CPU. For {profile.device}: `{export_command(profile)}`")
    for note in notes:
        logger.warning(note)
    return notes


def moe_op(manifest: Manifest | None) -> str | None:
    """How a mixture-of-experts package computes its experts (MoE, QMoE, dense); None: no experts."""
    moe = manifest.provenance.get("moe") if manifest is not None else None
    return moe.get("expert_op") if isinstance(moe, dict) else None


def moe_line(profile: DeviceProfile, manifest: Manifest | None) -> str | None:
    """One line saying how the package's experts run on this profile's provider, and why."""
    op = moe_op(manifest)
    if op is None:
        return None
    moe = manifest.provenance["moe"]
    active = f"{moe.get('experts_per_token')} of {moe.get('num_experts')} experts per token"
    listed = f"{profile.name} moe_ops: {', '.join(profile.moe_ops) or 'none'}"
    if op == "dense":
        return (f"experts: plain MatMuls over all experts ({active}: every expert is computed and weighted), "
                f"because the package's target {manifest.target} has no MoE kernels ({listed})")
    where = profile.provider if op in profile.moe_ops else "CPUExecutionProvider (fallback)"
    return f"experts: com.microsoft {op} ({active}) on {where} ({listed})"


def export_command(profile: DeviceProfile) -> str:
    return EXPORT_COMMAND.format(precision=profile.package.precision, target=profile.package.target)


def gib(n: int) -> str:
    """Bytes for people: GiB with one decimal, MiB below 1 GiB."""
    return f"{n / (1 << 30):.1f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.1f} MiB"


# ---------------------------------------------------------------------- result


def _placement(profile, index, options, result, detection, manifest, asked, head, notes) -> Placement:
    providers: list[tuple[str, dict[str, str]]] = [(profile.provider, options)]
    if profile.cpu_fallback and profile.provider != "CPUExecutionProvider":
        providers.append(("CPUExecutionProvider", {}))
    threads, spinning = asked
    hidden = manifest.dims.hidden_size if manifest is not None else None
    choice = choose_threads(profile, detection.cpu.physical_cores, detection.cpu.load, hidden_size=hidden,
                            threads=threads, spinning=spinning)
    lines = [head, f"  profile {profile.name}: {profile.applies}"]
    size = manifest.size_bytes if manifest is not None else 0
    free, where = free_memory(profile, detection, index)
    if size and free is not None:
        lines.append(f"  memory: needs ~{gib(math.ceil(size * profile.memory_factor))}, {gib(free)} {where}")
    lines += thread_lines(choice)
    experts = moe_line(profile, manifest)
    if experts is not None:
        lines.append(f"  {experts}")
    lines += [f"  note: {note}" for note in notes]
    return Placement(
        device=profile.device,
        profile=profile,
        providers=tuple(providers),
        threads=choice.threads,
        spinning=choice.spinning,
        threads_why=choice.threads_why,
        spinning_why=choice.spinning_why,
        explanation="\n".join(lines),
        notes=tuple(notes),
        device_index=index,
        probe=result,
    )


def thread_lines(choice: ThreadChoice) -> list[str]:
    return [f"  threads: {choice.threads} ({choice.threads_why})",
            f"  spinning: {'on' if choice.spinning else 'off'} ({choice.spinning_why})"]


@dataclass(frozen=True)
class ProfileStatus:
    """One row of `unmask devices`: a profile and what this machine says about it."""

    profile: DeviceProfile
    applies: bool  # written for this OS / CPU architecture
    in_build: bool  # the provider is in onnxruntime.get_available_providers()
    probe: ProbeResult | None = None  # None: not probed (not in the build, or does not apply)
    extra: dict[str, Any] = field(default_factory=dict)


def survey(detection: Detection, profiles: Sequence[DeviceProfile], probe: Probe | None = None) -> list[ProfileStatus]:
    """Every profile with whether it applies, is in the build, and passes its probe (best first)."""
    probe = probe if probe is not None else run_probe
    rows = []
    for p in sorted(profiles, key=lambda p: (-p.priority, p.name)):
        applies = p.applies_to(detection.os, detection.cpu.arch)
        in_build = p.provider in detection.available_providers
        result = probe(p, provider_options(p, None)) if applies and in_build else None
        rows.append(ProfileStatus(p, applies, in_build, result))
    return rows
