"""`unmask export owner/name OUT`: fetch a checkpoint from the Hugging Face Hub, then export it.

The rule for SRC: a path that exists is a local checkpoint folder; otherwise `owner/name`
(exactly one `/`, the Hub's own characters) is a Hub repo id. Only the files the exporter
reads are fetched (CHECKPOINT_FILES), through `huggingface_hub.snapshot_download`: its
progress bars, its cache ($HF_HOME / $HF_HUB_CACHE) and its offline switch (HF_HUB_OFFLINE=1
uses the cache and never the network). The Hub's failures become one-line ConfigErrors.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..errors import ConfigError
from .config import ExportConfig

# What export_model reads from a checkpoint folder (checkpoint.py, safetensors_io.py): nothing
# else is downloaded, so a repo's PyTorch .bin copies, remote code and images stay on the Hub.
CHECKPOINT_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors.index.json",
                    "*.safetensors")
_REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")
_EXTRA = 'pip install "unmask[export]"'


def is_repo_id(src: str | os.PathLike) -> bool:
    """True when SRC names a Hub repo: not an existing path, and of the form owner/name."""
    text = os.fspath(src)
    return not Path(text).exists() and _REPO_ID.fullmatch(text) is not None and ".." not in text


def prepare_output(out: str | os.PathLike, config: ExportConfig) -> Path:
    """OUT as a folder (a bare name: in the model store), with the settings and OUT checked now,
    before a download that may take minutes."""
    from ..store import target
    from .package import check_output

    folder = target(out)
    config.resolve()
    check_output(folder, config.force)
    return folder


def checkpoint_folder(src: str | os.PathLike) -> Path:
    """SRC as a local checkpoint folder: a path as is, a Hub repo id fetched (or found in the cache)."""
    return fetch(os.fspath(src)) if is_repo_id(src) else Path(src)


def fetch(repo_id: str, revision: str | None = None) -> Path:
    """The snapshot folder holding the repo's CHECKPOINT_FILES (downloaded unless cached)."""
    try:
        import huggingface_hub
        from huggingface_hub.utils import (GatedRepoError, HfHubHTTPError, LocalEntryNotFoundError,
                                           RepositoryNotFoundError, RevisionNotFoundError)
    except ImportError:
        raise ConfigError(f"fetching {repo_id} from the Hugging Face Hub needs huggingface_hub: {_EXTRA}") from None
    where = f"{repo_id}@{revision}" if revision else repo_id
    try:
        folder = huggingface_hub.snapshot_download(repo_id, revision=revision, allow_patterns=list(CHECKPOINT_FILES))
    except GatedRepoError:  # before RepositoryNotFoundError: it is a subclass
        raise ConfigError(f"{where}: a gated repo; accept its terms on huggingface.co, set HF_TOKEN "
                          "(or log in with the Hugging Face CLI), then run this again") from None
    except RepositoryNotFoundError:
        raise ConfigError(f"{where}: no such folder here and no such model repo on the Hugging Face Hub "
                          "(a private repo needs HF_TOKEN or a Hugging Face CLI login)") from None
    except RevisionNotFoundError:
        raise ConfigError(f"{where}: the repo has no such revision") from None
    except LocalEntryNotFoundError:
        raise ConfigError(f"{where}: not in the Hugging Face cache and the Hub cannot be reached "
                          "(offline: HF_HUB_OFFLINE=1 or no network); download it once while online") from None
    except (HfHubHTTPError, OSError) as exc:
        raise ConfigError(f"{where}: download from the Hugging Face Hub failed ({_first_line(exc)})") from None
    path = Path(folder)
    if not (path / "config.json").is_file():
        raise ConfigError(f"{where}: the repo has no config.json, so it is not a LLaDA/Dream checkpoint")
    return path


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
