"""Module-level lazy attributes (PEP 562) for the `unmask` package."""

from importlib import import_module
from typing import Any, Callable, Mapping


def lazy_getattr(package: str, table: Mapping[str, str]) -> Callable[[str], Any]:
    """A module `__getattr__` importing `table[name]` (a module relative to `package`) on first use."""
    namespace = import_module(package).__dict__

    def __getattr__(name: str) -> Any:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(module, package), name)
        namespace[name] = value  # later lookups skip __getattr__
        return value

    return __getattr__
