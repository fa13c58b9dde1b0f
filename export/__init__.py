"""unmask.export: convert a trained denoiser checkpoint into a model package.

    from unmask.export import export_model
    export_model("LLaDA-8B-Instruct", "llada-int4", precision="int4", target="cpu")

Importing this package is cheap: onnx, onnxruntime and numpy load on first use.
"""

from importlib import import_module

_LAZY = {
    "export_model": ".package",
    "ExportResult": ".package",
    "ExportConfig": ".config",
    "export_torch": ".torch_export",
}


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'unmask.export' has no attribute {name!r}")
    value = getattr(import_module(module, __name__), name)
    globals()[name] = value
    return value


__all__ = list(_LAZY)
