"""unmask.devices: device profiles, detection and execution-provider selection.

    from unmask.devices import select
    placement = select(manifest, device="auto")     # or "cpu", "cuda", "cuda:1", "dml", "coreml"
    session = placement.create_session("pkg/model.onnx")
    print(placement.explanation)

Profiles are data (`devices/profiles/*.toml`, one per device family); `detect()`
reads the machine once; `select()` is pure over (Detection, profiles, manifest)
plus a probe session that confirms the provider really runs. Importing this
package never imports onnxruntime: a broken provider cannot crash `import unmask`.
"""

from .detect import CpuInfo, Detection, EpDevice, GpuInfo, MemoryInfo, detect
from .probe import PROBE_MODEL, ProbeResult, probe
from .profile import DeviceProfile, PackageFit, SessionSettings, load_profile, load_profiles
from .select import (
    DeviceFallbackWarning,
    Placement,
    ProfileStatus,
    candidates,
    device_names,
    parse_device,
    select,
    survey,
)

__all__ = [
    "CpuInfo",
    "Detection",
    "DeviceFallbackWarning",
    "DeviceProfile",
    "EpDevice",
    "GpuInfo",
    "MemoryInfo",
    "PROBE_MODEL",
    "PackageFit",
    "Placement",
    "ProbeResult",
    "ProfileStatus",
    "SessionSettings",
    "candidates",
    "detect",
    "device_names",
    "load_profile",
    "load_profiles",
    "parse_device",
    "probe",
    "select",
    "survey",
]
