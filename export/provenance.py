"""What a package records as its source: a name a person recognises, not a scratch folder's.

`unmask info` shows it, so it should say which model this is: the Hub repo id where the
checkpoint came from the Hub cache (`models--ORG--NAME/snapshots/<commit>`), else the name
the checkpoint's config.json was saved under (`_name_or_path`, when it is a repo id), else the
folder's name, unless that folder was made by a script in the temp directory.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from ..errors import ModelFormatError
from .checkpoint import read_config

_SNAPSHOT = re.compile(r"[0-9a-f]{40}")  # a Hub cache snapshot folder is named by its commit hash


def source_label(src: str | Path) -> str:
    """The label of checkpoint folder `src` for the manifest's provenance."""
    folder = Path(src).resolve()
    hub = _hub_repo(folder)
    if hub:
        return hub
    try:
        config = read_config(folder)
    except ModelFormatError:
        config = {}
    named = config.get("_name_or_path")
    if isinstance(named, str) and _is_repo_id(named):
        return named
    if not _is_scratch(folder):
        return folder.name
    kind = (config.get("architectures") or [config.get("model_type") or "checkpoint"])[0]
    return f"{kind} from a temporary folder"


def _hub_repo(folder: Path) -> str | None:
    """ORG/NAME for a Hub cache snapshot (models--ORG--NAME/snapshots/<hash>), else None."""
    if not (_SNAPSHOT.fullmatch(folder.name) and folder.parent.name == "snapshots"):
        return None
    cache = folder.parent.parent.name
    if not cache.startswith("models--"):
        return None
    return cache[len("models--"):].replace("--", "/")


def _is_repo_id(name: str) -> bool:
    """ORG/NAME as the Hub spells it; a saved local path (absolute, ./, C:\\) is not one."""
    return re.fullmatch(r"[\w.-]+/[\w.-]+", name) is not None and not name.startswith(".")


def _is_scratch(folder: Path) -> bool:
    """A folder a script made in the temp directory (tempfile, pytest): its name says nothing."""
    temp = Path(tempfile.gettempdir()).resolve()
    return folder.is_relative_to(temp) or _SNAPSHOT.fullmatch(folder.name) is not None


__all__ = ["source_label"]
