"""Every repository file a comment, docstring or document cites exists in the repository.

The scanner reads the prose of the tree (comments and docstrings of Python and C++
sources, comments of TOML and CMake files, the whole of Markdown files) and checks three
kinds of reference:

- any Markdown file name, bare or with a path: documents are the references that go stale;
- a path whose first folder is a top-level folder of the repository
  (`csrc/numpy_io.cpp`, `devices/profiles/*.toml`, `docs/`), or the installed name of one
  (`unmask/models/default` is `runtime/models/default`), or a folder beside the citing file;
- a bare source file name (`numpy_io.cpp`, `families.py`), which must name some file of
  the repository.

Top-level folders are read from the tree, so a folder added later (say `training/`) is
recognised without changing this file.
"""

from __future__ import annotations

import ast
import io
import os
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Names that look like repository files but name something else.
NOT_REPO_FILES = {
    "bench.md": "written by `unmask bench` into its output folder",
    "llama.cpp": "a project, not a file",
}
# Installed subpackages with a source folder of their own (CMakeLists.txt install rules);
# the rest of `unmask/` is `runtime/`.
INSTALLED_SUBPACKAGES = ("export", "devices")
SCANNED_SUFFIXES = {".py", ".pyi", ".cpp", ".h", ".toml", ".md"}
SCANNED_NAMES = {"CMakeLists.txt"}
BARE_FILE = re.compile(r"[\w-][\w.-]*\.(?:md|py|pyi|cpp|h|toml)$")  # no globs, no leading dot

_TOKEN = re.compile(r"[A-Za-z0-9_.*/-]+")


# ---------------------------------------------------------------------- the tree


def _skipped_dir(path: Path) -> bool:
    name = path.name
    return (name.startswith(".") or name in ("__pycache__", "build", "dist", "node_modules")
            or name.endswith(".egg-info") or (path / "pyvenv.cfg").exists())


def repo_files(root: Path = ROOT) -> list[Path]:
    """Every file of the tree, without VCS data, virtual environments and build output."""
    found = []
    for folder, dirs, files in os.walk(root):
        here = Path(folder)
        dirs[:] = sorted(d for d in dirs if not _skipped_dir(here / d))
        found += [here / f for f in sorted(files) if not f.startswith(".")]
    return found


# ---------------------------------------------------------------------- prose of a file


def _python_prose(text: str) -> list[tuple[int, str]]:
    """(line, text) of every comment and docstring."""
    out = []
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            out.append((tok.start[0], tok.string))
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                out.append((body[0].lineno, body[0].value.value))
    return out


def _matches(pattern: str, text: str) -> list[tuple[int, str]]:
    return [(text.count("\n", 0, m.start()) + 1, m.group(0)) for m in re.finditer(pattern, text, re.S)]


def prose(path: Path, text: str) -> list[tuple[int, str]]:
    """The parts of a file that may cite documents: (first line, text) pieces."""
    if path.suffix in (".py", ".pyi"):
        return _python_prose(text)
    if path.suffix in (".cpp", ".h"):
        return _matches(r"//[^\n]*|/\*.*?\*/", text)
    if path.suffix == ".toml" or path.name == "CMakeLists.txt":
        return _matches(r"#[^\n]*", text)
    return [(1, text)]  # Markdown: all of it is prose


# ---------------------------------------------------------------------- references


class Resolver:
    """Decides whether a token of prose cites a repository file, and whether that file exists."""

    def __init__(self, root: Path, files: list[Path]):
        self.root = root
        self.names = {f.name for f in files}
        self.top = {p.name for p in root.iterdir() if p.is_dir() and not _skipped_dir(p)}

    def exists(self, base: Path, rel: str) -> bool:
        rel = rel.rstrip("/")
        return any(base.glob(rel)) if "*" in rel else (base / rel).exists()

    def broken(self, citing: Path, token: str) -> bool:
        """True when `token` (from prose of `citing`, cleaned) names a repository file that does not exist."""
        if not token or token.startswith("/") or token in NOT_REPO_FILES or token.strip("./*") == "":
            return False
        if "/" not in token:  # a bare name: some file of the tree must carry it
            return bool(BARE_FILE.match(token)) and token not in self.names
        first = token.split("/", 1)[0]
        if first == "unmask":  # an installed path
            return not self.exists(self.root, self.source_path(token))
        if first in self.top:  # a path from the repository root
            return not self.exists(self.root, token)
        if first not in (".", "..") and (citing.parent / first).is_dir():  # a path from the citing file's folder
            return not self.exists(citing.parent, token)
        if token.endswith(".md") and token.rsplit("/", 1)[1] not in NOT_REPO_FILES:
            return not self.exists(citing.parent, token)  # a document relative to the citing one
        return False  # anything else with a slash is prose ("fp32/fp16", "K/V") or outside the repo

    @staticmethod
    def source_path(installed: str) -> str:
        """An installed path (first folder `unmask`) -> the repository path it is installed from."""
        parts = installed.split("/")[1:]
        if parts and parts[0] in INSTALLED_SUBPACKAGES:
            return "/".join(parts)
        return "/".join(["runtime", *parts])

    def unresolved(self, citing: Path, text: str) -> list[str]:
        """The broken references in `text`, a piece of prose of the file `citing`."""
        tokens = (_clean(t) for t in _TOKEN.findall(text))
        return [t for t in tokens if self.broken(citing, t)]


def _clean(token: str) -> str:
    """Without sentence punctuation after it and a leading './'."""
    token = token.rstrip(".,:;-")
    return token[2:] if token.startswith("./") else token


def scan(root: Path = ROOT) -> list[str]:
    """'path:line: reference' for every broken reference in the tree."""
    files = repo_files(root)
    resolver = Resolver(root, files)
    problems = []
    for path in files:
        if path.suffix not in SCANNED_SUFFIXES and path.name not in SCANNED_NAMES:
            continue
        text = path.read_text(encoding="utf-8")
        for line, piece in prose(path, text):
            for ref in resolver.unresolved(path, piece):
                problems.append(f"{path.relative_to(root)}:{line}: {ref}")
    return problems


# ---------------------------------------------------------------------- tests


@pytest.fixture(scope="module")
def resolver():
    return Resolver(ROOT, repo_files())


class TestTree:
    def test_every_reference_resolves(self):
        problems = scan()
        assert problems == [], "references to files that are not in the repository:\n" + "\n".join(problems)

    def test_the_documents_exist(self):
        for name in ("architecture.md", "graph-contract.md", "manifest.md", "models.md"):
            assert (ROOT / "docs" / name).is_file(), name

    def test_scan_covers_sources_and_documents(self):
        scanned = {p.relative_to(ROOT).as_posix() for p in repo_files()}
        assert {"csrc/params.h", "runtime/decoding.py", "README.md", "docs/models.md",
                "devices/profiles/cpu-x86.toml"} <= scanned
        assert not any(part.startswith(".") for p in scanned for part in Path(p).parts)


def gone(stem: str) -> str:
    """The name of a document no checkout holds, put together here so that this file cites none."""
    return stem + ".md"


class TestResolver:
    CITING = ROOT / "runtime" / "decoding.py"

    @pytest.mark.parametrize("text", [
        f"A C++ Decoder for one generation (see {gone('CONTRACTS')} for the request/advance protocol).",
        f"written from {gone('MODELS')} section 2",
        "runtime/decode.py fills it from GenerationConfig",
        "csrc/bindings.h maps each to one Python class",
        "see docs/contracts.md",
        "the default model in unmask/models/missing/unmask.json",
        "numbers from decode.py",
        "devices/profiles/*.yaml",
    ])
    def test_broken_reference_is_found(self, resolver, text):
        assert resolver.unresolved(self.CITING, text) != []

    @pytest.mark.parametrize("text", [
        "the error mapping is register_errors in csrc/numpy_io.cpp.",
        "see docs/graph-contract.md and README.md",
        "runtime/decoding.py fills it; numpy_io.cpp converts",
        "unmask/models/default/ (installed from runtime/)",
        "devices/profiles/*.toml, tests/gpu/",
        "bench.json, bench.md and the chart; like llama.cpp",
        f"#include <pybind11/numpy.h>; fp32/fp16/bf16; https://example.org/x/{gone('NOTES')}",
        "CKPT/training_summary.json",
    ])
    def test_valid_or_foreign_text_passes(self, resolver, text):
        assert resolver.unresolved(self.CITING, text) == []

    def test_markdown_link_resolves_beside_the_document(self, resolver):
        doc = ROOT / "docs" / "architecture.md"
        assert resolver.unresolved(doc, "[the contract](graph-contract.md)") == []
        assert resolver.unresolved(doc, "[gone](graph-contracts.md)") == ["graph-contracts.md"]


class TestProse:
    def test_python_comments_and_docstrings_only(self):
        contracts, code, notes, design = (gone(stem) for stem in ("CONTRACTS", "CODE", "NOTES", "DESIGN"))
        source = (f'"""Module doc: {contracts}."""\n'
                  f'x = "{code}"  # comment: {notes}\n'
                  f'def f():\n    """Function doc: {design}."""\n')
        texts = " ".join(t for _, t in prose(Path("m.py"), source))
        assert contracts in texts and notes in texts and design in texts
        assert code not in texts

    def test_cpp_comments_only(self):
        source = '// line: A.md\nconst char* s = "B.md";\n/* block:\n C.md */\n'
        pieces = prose(Path("x.cpp"), source)
        assert [line for line, _ in pieces] == [1, 3]
        texts = " ".join(t for _, t in pieces)
        assert "A.md" in texts and "C.md" in texts and "B.md" not in texts

    def test_old_contracts_reference_fails_the_scan(self, tmp_path):
        (tmp_path / "runtime").mkdir()
        contracts = gone("CONTRACTS")
        (tmp_path / "runtime" / "decoding.py").write_text(
            f'"""Decoder (see {contracts} for the protocol)."""\n', encoding="utf-8")
        assert scan(tmp_path) == [f"runtime/decoding.py:1: {contracts}"]
        (tmp_path / contracts).write_text("# the protocol\n", encoding="utf-8")
        assert scan(tmp_path) == []
