"""What the installed package holds and how its parts may depend on each other.

`unmask.export` may import from the runtime only the manifest schema, the generation
config and the error types; training code (the checkout's training/ folder) is never
installed. These tests read the installed files, so they check the wheel that
`pip install .` built, not the source tree.
"""

from __future__ import annotations

import ast
import importlib.util
import json
from importlib import metadata
from pathlib import Path

import pytest

import unmask
import unmask.export

EXPORT_MAY_IMPORT = {"unmask.manifest", "unmask.config", "unmask.errors"}


def imported_modules(source: str, package: str) -> set[str]:
    """Every module an `import` in `source` names, relative ones resolved against `package`.

    `from P import a, b` counts as P.a and P.b, since a name imported from a package may be
    a submodule (`from .. import tasks`) or something its __init__ defines (`__version__`).
    """
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            stem = ".".join([*base, *(node.module.split(".") if node.module else [])])
            found.update(f"{stem}.{alias.name}" for alias in node.names)
    return found


def runtime_imports(module_file: Path, export_dir: Path) -> set[str]:
    """The modules of `unmask` outside `unmask.export` that `module_file` imports."""
    rel = module_file.relative_to(export_dir).with_suffix("")
    parts = ["unmask", "export", *rel.parts[:-1]]  # the package the file sits in
    names = imported_modules(module_file.read_text(encoding="utf-8"), ".".join(parts))
    outside = {name for name in names if name.split(".")[0] == "unmask" and not name.startswith("unmask.export.")}
    # `from unmask.manifest import Manifest` names unmask.manifest.Manifest: keep the module
    return {".".join(name.split(".")[:2]) for name in outside}


class TestImportWalker:
    def test_resolves_relative_and_absolute_imports(self):
        source = ("import json\nfrom .. import __version__, tasks\nfrom ..evaluate import evaluate\n"
                  "from .package import export_model\nfrom unmask.errors import ConfigError\n"
                  "def f():\n    from ...x import y\n")
        assert imported_modules(source, "unmask.export") == {
            "json", "unmask.__version__", "unmask.tasks", "unmask.evaluate.evaluate",
            "unmask.export.package.export_model", "unmask.errors.ConfigError", "x.y"}

    def test_flags_what_export_must_not_import(self, tmp_path):
        (tmp_path / "mod.py").write_text("from .. import __version__\nfrom ..evaluate import evaluate\n"
                                         "from ..manifest import Manifest\nfrom .config import ExportConfig\n")
        assert runtime_imports(tmp_path / "mod.py", tmp_path) == {"unmask.__version__", "unmask.evaluate",
                                                                  "unmask.manifest"}


class TestInstalledExport:
    def test_export_imports_only_manifest_config_and_errors_from_the_runtime(self):
        export_dir = Path(unmask.export.__file__).parent
        files = sorted(export_dir.rglob("*.py"))
        assert export_dir / "package.py" in files
        used = {str(f.relative_to(export_dir)): runtime_imports(f, export_dir) for f in files}
        assert {f: mods - EXPORT_MAY_IMPORT for f, mods in used.items() if mods - EXPORT_MAY_IMPORT} == {}
        assert set().union(*used.values()) == EXPORT_MAY_IMPORT  # each of the three is still used

    def test_no_training_code_is_importable_from_the_package(self):
        export_dir = Path(unmask.export.__file__).parent
        assert not (export_dir / "training").exists() and not (export_dir / "ship_default.py").exists()
        for name in ("unmask.export.training", "unmask.export.ship_default"):
            assert importlib.util.find_spec(name) is None, name

    def test_the_installed_files_hold_no_training_code(self):
        dist = metadata.distribution("unmask")
        direct_url = json.loads(dist.read_text("direct_url.json") or "{}")
        if direct_url.get("dir_info", {}).get("editable"):
            pytest.skip("an editable install records no package files; run from `pip install .`")
        files = {str(f).replace("\\", "/") for f in dist.files or ()}
        assert {"unmask/__init__.py", "unmask/export/package.py", "unmask/tasks.py", "unmask/evaluate.py",
                "unmask/devices/profiles/cpu-x86.toml"} <= files
        assert any(f.startswith("unmask/_core.") for f in files)
        leaked = sorted(f for f in files if "training" in Path(f).parts or Path(f).name in
                        {"ship_default.py", "train.py", "eval_default.py", "arith_probe.py"})
        assert leaked == []
