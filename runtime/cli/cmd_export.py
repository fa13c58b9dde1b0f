"""`unmask export SRC OUT`: convert a LLaDA/Dream/SDAR/LLaDA2 checkpoint folder into a model package.

Flags map one-to-one onto ExportConfig fields; the work is `unmask.export.export_model`.
"""

from __future__ import annotations

import click

from ..export.config import ATTENTIONS, DEFAULT_BLOCK_SIZE, PRECISIONS, ROPES, TARGETS


@click.command("export")
@click.argument("src")
@click.argument("out")
@click.option("--precision", type=click.Choice(PRECISIONS), default="fp32", show_default=True,
              help="Storage of the transformer's matrices (embedding and LM head stay higher).")
@click.option("--target", type=click.Choice(TARGETS), default="cpu", show_default=True,
              help="Execution provider family the graph is shaped for.")
@click.option("--block-size", type=int, default=DEFAULT_BLOCK_SIZE, show_default=True,
              help="int4: weights per quantization block.")
@click.option("--attention", type=click.Choice(ATTENTIONS), default="auto", show_default=True,
              help="Attention kernel (auto: the fastest measured for the target).")
@click.option("--rope", type=click.Choice(ROPES), default="auto", show_default=True,
              help="Rotary embedding: contrib (ORT's RotaryEmbedding kernel), ops (elementwise, every EP); "
                   "auto: contrib on cpu/cuda.")
@click.option("--force", is_flag=True, help="Replace OUT if it exists.")
@click.option("--no-validate", "no_validate", is_flag=True, help="Skip running the graph on probe inputs.")
@click.option("--reference", type=click.Choice(["torch"]), default=None,
              help="Also compare with the PyTorch reference forward (needs the test extra).")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar or validation table.")
def command(src, out, precision, target, block_size, attention, rope, force, no_validate, reference, quiet):
    """Convert the checkpoint SRC (config.json, safetensors, tokenizer) into the package OUT.

    SRC is a folder, or a Hugging Face repo id (owner/name) fetched with huggingface_hub.
    OUT is a folder, or a bare NAME: the package goes into the model store (`unmask list`).

    \b
    Examples:
      unmask export GSAI-ML/LLaDA-8B-Instruct llada-int4 --precision int4
      unmask export ./LLaDA-8B-Instruct ./llada-int4 --precision int4
      unmask export ./Dream-v0-Instruct-7B ./dream-fp16 --precision fp16 --target cuda
      unmask export ./SDAR-1.7B-Chat ./sdar-int8 --precision int8
      unmask export ./LLaDA2.0-mini ./llada2-int4 --precision int4
    """
    from ..export import extra
    from ..store import target as store_target

    extra.require()  # one line naming `pip install "unmask[export]"` instead of a traceback
    from ..export import ExportConfig, export_model, hub

    config = ExportConfig(precision=precision, target=target, block_size=block_size, attention=attention, rope=rope,
                          force=force, validate=not no_validate, reference=reference, quiet=quiet)
    out = hub.prepare_output(store_target(out), config)  # a bare name: the model store; checked before any download
    src = hub.checkpoint_folder(src)  # a Hub repo id is fetched (or found in the Hugging Face cache)
    result = export_model(src, out, config=config)
    m = result.manifest
    if not quiet:
        click.echo(f"wrote {result.path} ({m.architecture}, {m.precision}, target {m.target}, "
                   f"{m.size_bytes / 2**20:.1f} MiB)", err=True)
