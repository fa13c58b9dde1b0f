"""`unmask info PKG`: what a model package holds, without loading the graph."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ..errors import ModelFormatError
from ..manifest import MANIFEST_NAME, Manifest, read_manifest
from ..package import open_package
from .options import check_model_path, describe, resolve_model


def _special_tokens(manifest: Manifest, folder: Path) -> dict[str, dict]:
    """{name: {id, token}}; the token strings come from the package's tokenizer.json."""
    strings: dict[int, str] = {}
    tokenizer = folder / manifest.tokenizer
    if tokenizer.is_file():
        import tokenizers

        try:
            backend = tokenizers.Tokenizer.from_file(str(tokenizer))
        except Exception as exc:  # tokenizers raises a bare Exception on a bad file
            raise ModelFormatError(f"{tokenizer}: not a readable tokenizer ({exc})") from exc
        ids = [getattr(manifest.special_ids, n) for n in ("mask_id", "eos_id", "eot_id", "bos_id", "pad_id")]
        strings = {i: backend.id_to_token(i) for i in ids if i is not None}
    out = {}
    for name in ("mask_id", "eos_id", "eot_id", "bos_id", "pad_id"):
        token_id = getattr(manifest.special_ids, name)
        if token_id is not None:
            out[name[:-3]] = {"id": token_id, "token": strings.get(token_id)}
    return out


def _disk_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.iterdir() if p.is_file())


def info_document(folder: Path, *, verify: bool = False) -> dict:
    manifest = read_manifest(folder)
    graph = folder / manifest.graph.file
    if not graph.is_file():
        raise ModelFormatError(f"{graph}: graph file named in {MANIFEST_NAME} is missing")
    if verify:  # every check unmask.load makes before opening a session, sha256 included
        open_package(folder)
    config = manifest.generation_config()
    return {
        "path": str(folder),
        "format_version": manifest.format_version,
        "architecture": manifest.architecture,
        "precision": manifest.precision,
        "target": manifest.target,
        "kv_dtype": manifest.kv_dtype,
        "cache_reuse": manifest.cache_reuse,
        "shift_logits": manifest.shift_logits,
        "size_bytes": manifest.size_bytes,
        "disk_bytes": _disk_bytes(folder),
        "dims": vars(manifest.dims).copy(),
        "special_tokens": _special_tokens(manifest, folder),
        "chat_template": manifest.chat_template is not None,
        "generation": config.to_dict(),
        "package_defaults": dict(manifest.generation),
        "provenance": manifest.provenance,
        "verified": verify,
    }


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


def _text(doc: dict) -> str:
    d = doc["dims"]
    specials = ", ".join(
        f"{name} {v['token']!r} ({v['id']})" if v["token"] is not None else f"{name} {v['id']}"
        for name, v in doc["special_tokens"].items()
    )
    prov = doc["provenance"]
    lines = [
        f"package        {doc['path']}  (format {doc['format_version']})",
        f"architecture   {doc['architecture']}  (shift_logits {str(doc['shift_logits']).lower()})",
        f"precision      {doc['precision']}, target {doc['target']}, key/value {doc['kv_dtype']}, "
        f"cache reuse {'yes' if doc['cache_reuse'] else 'no (runs with cache none)'}",
        f"size           graph {_mib(doc['size_bytes'])}, folder {_mib(doc['disk_bytes'])}"
        + ("  (sha256 verified)" if doc["verified"] else ""),
        f"dims           vocab {d['vocab_size']}, hidden {d['hidden_size']}, layers {d['num_layers']}, "
        f"heads {d['num_heads']} (kv {d['num_kv_heads']}), head_dim {d['head_dim']}, "
        f"max sequence {d['max_sequence_length']}",
        f"special tokens {specials}",
        f"chat template  {'yes' if doc['chat_template'] else 'no (prompts are used as given)'}",
    ]
    if prov:
        origin = ", ".join(f"{k} {v}" for k, v in prov.items() if isinstance(v, (str, int, float)))
        if origin:
            lines.append(f"provenance     {origin}")
    from ..config import GenerationConfig

    config = GenerationConfig.from_dict(doc["generation"])
    lines.append("default generation settings:")
    lines.append(describe(config, doc["package_defaults"], {}))
    return "\n".join(lines)


EXAMPLES = """\b
Examples:
  unmask info                      # the embedded model
  unmask info ./llada-int4
  unmask info ./llada-int4 --verify
  unmask info ./llada-int4 --json | jq .generation
"""


@click.command("info", epilog=EXAMPLES)
@click.argument("package", type=click.Path(path_type=Path), required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option("--verify", is_flag=True, help="Also hash every graph file against unmask.json (slow for big models).")
def command(package: Path | None, as_json: bool, verify: bool) -> None:
    """Summarize a model package: architecture, size, precision, special tokens, default settings.

    PACKAGE defaults to the embedded model.
    """
    if package is None:
        from ..model import default_package_dir

        package = default_package_dir()
    package = resolve_model(package)  # a name in the model store -> its folder
    check_model_path(package)
    doc = info_document(package, verify=verify)
    click.echo(json.dumps(doc, indent=2) if as_json else _text(doc))
