"""unmask.export: convert a trained denoiser checkpoint into a model package.

    from unmask.export import export_model
    export_model("LLaDA-8B-Instruct", "llada-int4", precision="int4", target="cpu")

Importing this package is cheap: onnx, onnxruntime and numpy load on first use.
"""

from importlib import import_module
from typing import Any

# public name -> module that defines it (imported on first use). The runtime's own
# `unmask._lazy` is not used: export imports from the runtime only its manifest, config
# and errors modules (tests/test_packaging.py).
_LAZY = {
    "export_model": ".package",
    "ExportResult": ".package",
    "ExportConfig": ".config",
    "export_torch": ".torch_export",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(_LAZY[name], __name__), name)


__all__ = list(_LAZY)
