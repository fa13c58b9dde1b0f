"""DeviceProfile: how unmask runs on one family of devices, read from a data file.

Each file in `devices/profiles/*.toml` is one family (cpu-x86, cpu-arm64, cuda,
directml, coreml, openvino): the execution provider and its options, the ORT
session settings, which package precision/target suits it, and when it applies.
The files are TOML so that every option can carry a comment saying why; the
dataclasses below give every field a default and validate what a file says, naming
the file and the offending key when it is wrong.
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping

from ..errors import ConfigError
from ..manifest import PRECISIONS, TARGETS

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: tomli is the same parser, published before it joined the stdlib
    try:
        import tomli as tomllib
    except ImportError:  # pragma: no cover - only on 3.10 without tomli
        tomllib = None

PROFILE_DIR = Path(__file__).parent / "profiles"

GRAPH_OPTIMIZATIONS = ("disabled", "basic", "extended", "all")
EXECUTION_MODES = ("sequential", "parallel")
# Keys older profiles had, with why they went and what to do instead.
RETIRED_KEYS = {
    "package.attention": "the exporter picks the attention kernel from package.target and the model "
                         "(override one export with `unmask export --attention`); remove the key",
}
MEMORY_KINDS = ("host", "device")  # where the weights live: RAM, or the accelerator's own memory
OS_NAMES = ("linux", "windows", "darwin")
MOE_OPS = ("MoE", "QMoE")  # the com.microsoft operators export/moe.py emits for experts
ARCH_NAMES = ("x86_64", "arm64")


@dataclass(frozen=True)
class SessionSettings:
    """onnxruntime.SessionOptions for one profile (the [session] table of a profile file)."""

    intra_op_threads: int = 0  # 0 = physical cores (usable by this process); ORT's own default is the same
    allow_spinning: bool = False  # idle pool threads may spin-wait instead of sleeping (when threads > 1; threads.py)
    stop_spinning_after_run: bool = False  # ...but stop when session.run returns: the C++ decoder scores between passes
    cpu_mem_arena: bool = True  # reuse CPU buffers across the many forward passes of one generation
    mem_pattern: bool = True  # plan allocations per input shape; DirectML needs it off
    graph_optimization: str = "all"  # ORT fuses RMSNorm, attention and quantized MatMul at load time
    execution_mode: str = "sequential"  # a transformer is a chain: parallel mode only adds overhead
    config_entries: dict[str, str] = field(default_factory=dict)  # extra session config keys, verbatim


@dataclass(frozen=True)
class PackageFit:
    """Which model packages suit a profile (the [package] table)."""

    precision: str = "fp32"  # the precision to export for this device
    target: str = "cpu"  # the export --target for this device
    precisions: tuple[str, ...] = ("fp32",)  # precisions that run well here
    targets: tuple[str, ...] = ("cpu",)  # package targets whose graphs run well here (auto picks by this)
    slower: dict[str, str] = field(default_factory=dict)  # precision -> why it runs slower here than `precision`


@dataclass(frozen=True)
class DeviceProfile:
    """One device family: provider, options, session settings and what packages suit it."""

    name: str = "cpu-x86"  # the file's stem: how `unmask devices` names the profile
    device: str = "cpu"  # the user-facing device name (`--device cuda`)
    aliases: tuple[str, ...] = ()  # other names accepted for `device` (directml for dml)
    applies: str = ""  # one line: on which machines this profile is the right one
    provider: str = "CPUExecutionProvider"  # onnxruntime execution provider name
    provider_options: dict[str, str] = field(default_factory=dict)  # passed verbatim to ORT (strings only)
    install: str = ""  # what to install when the provider is missing from the onnxruntime build
    os: tuple[str, ...] = ()  # operating systems it applies to; empty = any
    arch: tuple[str, ...] = ()  # CPU architectures it applies to; empty = any
    priority: int = 0  # auto picks the highest confirmed priority; CPU is 0, the last resort
    auto: bool = True  # False: used only when asked for by name
    cpu_fallback: bool = True  # append CPUExecutionProvider for ops the provider lacks
    memory: str = "host"  # where the weights live (which free memory the size check uses)
    memory_factor: float = 1.25  # bytes needed per byte of graph files: weights + arena + activations + K/V
    device_index_option: str | None = None  # provider option that `--device NAME:N` sets (device_id)
    # com.microsoft mixture-of-experts ops the provider runs itself (MoE: float experts, QMoE: 4/8-bit);
    # an export for a target whose profiles lack one uses plain MatMuls (float) or refuses (quantized)
    moe_ops: tuple[str, ...] = ()
    session: SessionSettings = field(default_factory=SessionSettings)
    package: PackageFit = field(default_factory=PackageFit)

    @property
    def names(self) -> tuple[str, ...]:
        return (self.device, *self.aliases)

    def applies_to(self, os_name: str, arch: str) -> bool:
        return (not self.os or os_name in self.os) and (not self.arch or arch in self.arch)


# ---------------------------------------------------------------------- loading


def load_profiles(directory: str | Path | None = None) -> tuple[DeviceProfile, ...]:
    """Every `*.toml` profile in `directory` (default: the packaged ones, read once), sorted by name."""
    if directory is None:
        return _packaged_profiles()
    return _load_folder(Path(directory))


@functools.lru_cache(maxsize=1)
def _packaged_profiles() -> tuple[DeviceProfile, ...]:
    return _load_folder(PROFILE_DIR)


def _load_folder(folder: Path) -> tuple[DeviceProfile, ...]:
    paths = sorted(folder.glob("*.toml"))
    if not paths:
        raise ConfigError(f"{folder}: no device profiles (*.toml) found")
    profiles = tuple(load_profile(p) for p in paths)
    _check_unique_names(profiles, folder)
    return profiles


def load_profile(path: str | Path) -> DeviceProfile:
    """Read one profile file; ConfigError names the file and the offending key."""
    path = Path(path)
    if tomllib is None:  # pragma: no cover
        raise ConfigError(f"{path}: reading device profiles on Python 3.10 needs tomli (pip install tomli)")
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read device profile ({exc})") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from exc
    return profile_from_dict(raw, name=path.stem, source=str(path))


def profile_from_dict(raw: Mapping[str, Any], *, name: str, source: str) -> DeviceProfile:
    values = _fields_from(DeviceProfile, raw, source, prefix="", nested=("session", "package"))
    values["session"] = SessionSettings(**_fields_from(SessionSettings, raw.get("session", {}), source, "session."))
    values["package"] = PackageFit(**_fields_from(PackageFit, raw.get("package", {}), source, "package."))
    values["name"] = name
    profile = DeviceProfile(**values)
    _check(profile, source)
    return profile


def _fields_from(cls, raw: Any, source: str, prefix: str, nested: tuple[str, ...] = ()) -> dict[str, Any]:
    """Type-check the keys of one TOML table against the dataclass `cls`."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{source}: key '{prefix.rstrip('.')}' must be a table")
    known = {f.name: f for f in fields(cls)}
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if key in nested:
            continue
        if prefix + key in RETIRED_KEYS:
            raise ConfigError(f"{source}: key '{prefix}{key}' is no longer read: {RETIRED_KEYS[prefix + key]}")
        if key not in known or key == "name":
            allowed = ", ".join(k for k in known if k != "name")
            raise ConfigError(f"{source}: unknown key '{prefix}{key}' (known: {allowed})")
        out[key] = _coerce(value, known[key], source, prefix + key)
    return out


def _coerce(value: Any, f, source: str, key: str) -> Any:
    default = f.default_factory() if callable(f.default_factory) else f.default
    kind = type(default) if default is not None else str
    bad = ConfigError(f"{source}: key '{key}' must be {_describe(kind)}, got {value!r}")
    if isinstance(default, tuple):
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise bad
        return tuple(value)
    if isinstance(default, dict):
        if not isinstance(value, Mapping) or not all(isinstance(v, str) for v in value.values()):
            raise ConfigError(f"{source}: key '{key}' must be a table of strings (ORT takes option values as text)")
        return dict(value)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise bad
    return value


def _describe(kind: type) -> str:
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string",
            tuple: "a list of strings"}.get(kind, kind.__name__)


def _check(p: DeviceProfile, source: str) -> None:
    def one_of(key: str, value: Any, allowed: tuple[str, ...]) -> None:
        if value not in allowed:
            raise ConfigError(f"{source}: key '{key}' = {value!r}: expected one of {', '.join(allowed)}")

    one_of("session.graph_optimization", p.session.graph_optimization, GRAPH_OPTIMIZATIONS)
    one_of("session.execution_mode", p.session.execution_mode, EXECUTION_MODES)
    one_of("package.precision", p.package.precision, PRECISIONS)
    one_of("package.target", p.package.target, TARGETS)
    one_of("memory", p.memory, MEMORY_KINDS)
    for value in p.package.precisions:
        one_of("package.precisions", value, PRECISIONS)
    for value in p.package.targets:
        one_of("package.targets", value, TARGETS)
    for value in p.package.slower:
        one_of("package.slower", value, PRECISIONS)
    for value in p.os:
        one_of("os", value, OS_NAMES)
    for value in p.moe_ops:
        one_of("moe_ops", value, MOE_OPS)
    for value in p.arch:
        one_of("arch", value, ARCH_NAMES)
    if not p.device or not p.device.isidentifier() or p.device != p.device.lower():
        raise ConfigError(f"{source}: key 'device' = {p.device!r}: expected a lower-case word")
    if not p.provider.endswith("ExecutionProvider"):
        raise ConfigError(f"{source}: key 'provider' = {p.provider!r}: expected an ORT provider name (...ExecutionProvider)")
    if p.session.intra_op_threads < 0:
        raise ConfigError(f"{source}: key 'session.intra_op_threads' must be >= 0 (0 = physical cores)")
    if p.memory_factor < 1.0:
        raise ConfigError(f"{source}: key 'memory_factor' must be >= 1.0 (the weights alone need 1.0)")


def _check_unique_names(profiles: tuple[DeviceProfile, ...], folder: Path) -> None:
    owner: dict[tuple[str, str], str] = {}
    for p in profiles:
        # several profiles may share a device name (cpu-x86, cpu-arm64) if they apply to different machines
        for name in p.aliases:
            if name in {q.device for q in profiles}:
                raise ConfigError(f"{folder / (p.name + '.toml')}: key 'aliases': {name!r} is already a device name")
        for os_name in p.os or OS_NAMES:
            for arch in p.arch or ARCH_NAMES:
                key = (p.device, f"{os_name}/{arch}")
                if key in owner:
                    raise ConfigError(
                        f"{folder / (p.name + '.toml')}: device {p.device!r} on {key[1]} is already "
                        f"covered by profile {owner[key]!r}"
                    )
                owner[key] = p.name
