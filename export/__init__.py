"""unmask.export: convert a trained denoiser checkpoint into a model package.

    from unmask.export import export_model
    export_model("LLaDA-8B-Instruct", "llada-int4", precision="int4", target="cpu")

Importing this package is cheap: onnx, onnxruntime and numpy load on first use.
"""

from .._lazy import lazy_getattr

_LAZY = {
    "export_model": ".package",
    "ExportResult": ".package",
    "ExportConfig": ".config",
    "export_torch": ".torch_export",
}


__getattr__ = lazy_getattr(__name__, _LAZY)


__all__ = list(_LAZY)
