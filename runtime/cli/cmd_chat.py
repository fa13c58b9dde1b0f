"""`unmask chat [MODEL]`: a multi-turn chat in the terminal."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from .options import echo_err, generation_options, model_label, open_model, pop_overrides, prepare
from .render import make_view
from .repl import ChatLoop, piped_lines, terminal_lines


EXAMPLES = """\b
Examples:
  unmask chat
  unmask chat ./llada-int4 --threshold 0.9 --gen-length 128 --block-length 32
  unmask chat ./dream-int4 --visual --algorithm entropy --steps 64
  printf 'Hi\\nWhat is 2+2?\\n' | unmask chat --no-stream
"""


@click.command("chat", epilog=EXAMPLES)
@click.argument("model", required=False, type=click.Path(path_type=Path))
@click.option("--system", help="System prompt for the conversation (change it later with /system).")
@click.option("--stream/--no-stream", default=True, show_default=True,
              help="Print each block of the answer as soon as it is finished.")
@click.option("--visual", is_flag=True,
              help="Redraw the whole answer in place while it denoises, masks shown as ░ (terminal only).")
@generation_options
def command(model, system, stream, visual, device, threads, verbose, **flags):
    """Chat with a model in the terminal, one turn after another.

    MODEL is a package folder made by `unmask export`; without it you chat
    with the embedded model. Type /help for the slash commands (/reset,
    /stats, /set KEY VALUE, /system TEXT, /save FILE, /exit). Ctrl-C cancels
    the answer being written; Ctrl-D leaves. With stdin piped, each line is
    one turn and only the answers are printed.
    """
    overrides = pop_overrides(flags)
    loaded = open_model(model, device, threads)
    session = loaded.chat(system=system, config=prepare(loaded, overrides, verbose=verbose))
    out = sys.stdout
    view = make_view(out, stream=stream, visual=visual, decode=loaded.tokenizer.decode, warn=echo_err)
    loop = ChatLoop(loaded, session, overrides, view=view, out=out, err=sys.stderr,
                    model_path=str(loaded.package.folder))
    stdin = sys.stdin
    if stdin.isatty():
        echo_err(f"unmask chat: {model_label(loaded)}")
        echo_err("type /help for commands, Ctrl-D to leave")
        loop.run(terminal_lines())
    else:
        loop.run(piped_lines(stdin))
