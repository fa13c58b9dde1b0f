"""unmask: run diffusion language models (LLaDA, Dream) on your own device.

    import unmask
    model = unmask.load()                 # the embedded default model
    print(model.generate("What is 12 + 30?").text)

Heavy submodules load on first use, so `import unmask` stays cheap.
"""

from importlib.metadata import PackageNotFoundError, version as _dist_version

from ._lazy import lazy_getattr
from .config import GenerationConfig, ModelFacts
from .errors import ConfigError, DeviceError, InputError, ModelFormatError, StateError, UnmaskError

try:
    __version__ = _dist_version("unmask")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

# public name -> module that defines it (imported lazily)
_LAZY = {
    "decode": ".decoding",
    "DecodeResult": ".decoding",
    "StepEvent": ".decoding",
    "load": ".model",
    "Model": ".model",
    "Result": ".model",
}


__getattr__ = lazy_getattr(__name__, _LAZY)


__all__ = [
    "GenerationConfig",
    "ModelFacts",
    "UnmaskError",
    "ConfigError",
    "ModelFormatError",
    "DeviceError",
    "InputError",
    "StateError",
    "__version__",
    *_LAZY,
]
