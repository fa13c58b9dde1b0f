"""The export extra: the modules `unmask export` needs beyond the runtime's own dependencies.

`pip install unmask` leaves them out (a runtime install should not carry a graph builder),
so the CLI checks for them before any work and names the one command that adds them.
"""

from __future__ import annotations

import importlib

from ..errors import ConfigError

# module imported -> distribution that provides it (pyproject.toml's `export` extra); huggingface_hub
# is checked by hub.py only when SRC is a Hub repo id, so a local export does not need it
MODULES = {"onnx": "onnx"}
INSTALL = 'pip install "unmask[export]"'


def require() -> None:
    """Raise one ConfigError naming the install command when a module of the export extra is missing."""
    missing = []
    for module, dist in MODULES.items():
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(dist)
    if missing:
        raise ConfigError(f"unmask export needs the export extra ({', '.join(missing)} not installed): "
                          f"{INSTALL}, or from a source tree: pip install \".[export]\"")
