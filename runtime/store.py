"""The local model store: model packages kept under a name, so `unmask chat tiny` finds one.

The store is one folder holding one package folder per name. It is `$UNMASK_MODELS` when
that is set, else the user's data folder: `$XDG_DATA_HOME/unmask/models` (by default
`~/.local/share/unmask/models`) on Linux, `~/Library/Application Support/unmask/models`
on macOS, `%LOCALAPPDATA%\\unmask\\models` on Windows. A data folder, not a cache folder:
a package is the result of an export the user asked for, not something that can be
downloaded again, so nothing should clean it up behind the user's back.

The one rule for a MODEL argument (every command, `unmask.load()`, `unmask export`'s OUT):
a path that exists is that path; otherwise a bare name (letters, digits, `.`, `_`, `-`;
no folder separator) is the package of that name in the store. `./tiny` always means the
folder `tiny` here.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from .errors import ConfigError, ModelFormatError

ENV = "UNMASK_MODELS"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def store_dir() -> Path:
    """The store folder ($UNMASK_MODELS, else the platform's user data folder); not created here."""
    configured = os.environ.get(ENV)
    if configured:
        return Path(configured).expanduser()
    home = Path.home()
    if sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA") or home / "AppData" / "Local")
    elif sys.platform == "darwin":
        base = home / "Library" / "Application Support"
    else:
        base = Path(os.environ.get("XDG_DATA_HOME") or home / ".local" / "share")
    return base / "unmask" / "models"


def is_name(text: str) -> bool:
    """A store name: one path component of letters, digits, '.', '_' and '-', not starting with '.'."""
    return _NAME.fullmatch(text) is not None


def resolve(model: str | os.PathLike | None) -> Path | None:
    """MODEL argument -> package folder: an existing path as is, else a stored package by name.

    None stays None (the embedded model). A bare name that is neither a folder here nor in
    the store raises ModelFormatError saying where it looked and how to make one; anything
    else that does not exist is returned as a path for the caller's own checks.
    """
    if model is None:
        return None
    path = Path(model)
    text = os.fspath(model)
    if path.exists() or not is_name(text):
        return path
    stored = store_dir() / text
    if (stored / "unmask.json").is_file():
        return stored
    raise ModelFormatError(
        f"{text}: no such folder here and no model package of that name in the store ({store_dir()}); "
        f"`unmask list` shows the stored ones, `unmask export SRC {text}` makes one"
    )


def target(out: str | os.PathLike) -> Path:
    """Where `unmask export SRC OUT` writes: an existing path or one with a folder in it as is,
    a bare name into the store (the store folder is created)."""
    path = Path(out)
    text = os.fspath(out)
    if path.exists() or not is_name(text):
        return path
    folder = store_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create the model store {folder} ({exc.strerror}); "
                          f"set {ENV} to another folder") from None
    return folder / text


@dataclass(frozen=True)
class Entry:
    """One stored package as `unmask list` shows it."""

    name: str
    path: Path
    architecture: str  # "?" when the manifest cannot be read
    precision: str
    size_bytes: int  # bytes on disk, every file of the folder
    problem: str | None = None  # why the manifest could not be read


def entries() -> list[Entry]:
    """Every package folder in the store, by name; an unreadable manifest is listed with its problem."""
    from .manifest import read_manifest

    folder = store_dir()
    if not folder.is_dir():
        return []
    found = []
    for sub in sorted(p for p in folder.iterdir() if p.is_dir() and (p / "unmask.json").is_file()):
        size = sum(f.stat().st_size for f in sub.rglob("*") if f.is_file())
        try:
            m = read_manifest(sub)
        except ModelFormatError as exc:
            found.append(Entry(sub.name, sub, "?", "?", size, problem=str(exc)))
            continue
        found.append(Entry(sub.name, sub, m.architecture, m.precision, size))
    return found


def remove(name: str) -> Entry:
    """Delete the stored package `name` (names only: never a path outside the store)."""
    if not is_name(name):
        raise ConfigError(f"{name!r} is not a store name (letters, digits, '.', '_', '-'); "
                          "`unmask rm` deletes only packages in the store")
    for entry in entries():
        if entry.name == name:
            shutil.rmtree(entry.path)
            return entry
    raise ConfigError(f"{name}: no model package of that name in the store ({store_dir()}); "
                      "`unmask list` shows the stored ones")
