"""The probe: does a provider really run here, not just appear in the wheel's list?

`get_available_providers()` names what the wheel was built with; a listed provider
can still fail when its libraries (CUDA, cuDNN, DirectX) or its device (no GPU) are
missing, and ORT then quietly runs the session on CPU, even while `get_providers()`
still names the provider. So the probe builds a session on a one-node graph with the
profile's provider alone and CPU fallback disabled: it only succeeds when that node
really is placed on the provider. Then it runs it and checks the result.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Callable

from .profile import DeviceProfile

# y = x + x for x float32[1, 4]; opset 13, IR 8, so every provider back to DirectML 1.12 accepts it.
# Serialized once with onnx.helper (onnx is an export extra, so the runtime ships the bytes);
# tests/test_devices.py rebuilds it with onnx and checks it is the same graph.
PROBE_MODEL = (
    b'\x08\x08\x12\x0eunmask.devices:A\n\x0e\n\x01x\n\x01x\x12\x01y"\x03Add\x12\x05probeZ\x13\n\x01x\x12\x0e'
    b'\n\x0c\x08\x01\x12\x08\n\x02\x08\x01\n\x02\x08\x04b\x13\n\x01y\x12\x0e\n\x0c\x08\x01\x12\x08\n\x02\x08'
    b'\x01\n\x02\x08\x04B\x04\n\x00\x10\r'
)


@dataclass(frozen=True)
class ProbeResult:
    ok: bool
    providers: tuple[str, ...] = ()  # what the probe session ended up using
    reason: str = ""  # why it failed (one line), empty when ok


Probe = Callable[[DeviceProfile, "dict[str, str] | None"], ProbeResult]

_cache: dict[tuple, ProbeResult] = {}


def probe(profile: DeviceProfile, provider_options: dict[str, str] | None = None) -> ProbeResult:
    """Run the probe graph with `profile`'s provider (cached per provider + options for this process)."""
    options = dict(profile.provider_options if provider_options is None else provider_options)
    key = (profile.provider, tuple(sorted(options.items())))
    if key not in _cache:
        _cache[key] = _run_probe(profile, options)
    return _cache[key]


def _run_probe(profile: DeviceProfile, options: dict[str, str]) -> ProbeResult:
    try:
        import numpy as np
        import onnxruntime as ort
    except Exception as exc:  # reported, not raised: the caller decides whether that is fatal
        return ProbeResult(False, (), f"onnxruntime failed to import: {_one_line(exc)}")
    so = ort.SessionOptions()
    so.log_severity_level = 4  # ORT logs provider and placement failures as errors; the reason is reported below
    so.intra_op_num_threads = 1
    providers: list = [(profile.provider, options)]
    if profile.provider != "CPUExecutionProvider":  # the Add must run on the provider, not on a CPU fallback
        so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    with warnings.catch_warnings(record=True) as caught:  # ORT warns about unlisted providers: fold it into the reason
        warnings.simplefilter("always")
        try:
            session = ort.InferenceSession(PROBE_MODEL, sess_options=so, providers=providers)
            (y,) = session.run(None, {"x": np.ones((1, 4), np.float32)})
            used = tuple(session.get_providers())
        except Exception as exc:  # every ORT failure (Fail, RuntimeError, ValueError) becomes a reason
            said = _one_line(caught[0].message) if caught else _one_line(exc)  # "not in available providers" first
            return ProbeResult(False, (), f"{profile.provider} did not run the probe graph ({said})")
    if profile.provider not in used:
        said = f": {_one_line(caught[0].message)}" if caught else ""
        return ProbeResult(False, used, f"{profile.provider} did not load, the session fell back to {', '.join(used)}{said}")
    if not np.array_equal(y, np.full((1, 4), 2.0, np.float32)):
        return ProbeResult(False, used, f"{profile.provider} computed 1 + 1 = {y.ravel()[0]}")
    return ProbeResult(True, used, "")


def _one_line(exc: BaseException | Warning) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


def clear_cache() -> None:
    _cache.clear()
