"""`unmask chat [MODEL]`: a multi-turn chat in the terminal."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ..examples import package_skills, skills_line
from .options import echo_err, generation_options, model_label, open_model, pop_overrides, prepare
from .render import make_view
from .repl import ChatLoop, piped_lines, terminal_lines


EXAMPLES = """\b
Examples:
  unmask chat
  unmask chat ./llada-int4 --threshold 0.9 --gen-length 128 --block-length 32
  unmask chat ./dream-int4 --visual --algorithm entropy --steps 64
  printf 'What is 2 + 2?\\n/reset\\nSort these: 33, 12, 25\\n' | unmask chat --no-stream
"""


def banner(model, config) -> list[str]:
    """What a chat starts with: the model, its context, what it can do, how to drive it."""
    m = model.manifest
    can = ["chat template", f"key/value reuse (cache {config.cache})" if model.cache_reuse else "no key/value reuse"]
    skills = package_skills(model.package.folder)
    return [
        f"unmask chat: {model_label(model)}",
        f"context {m.dims.max_sequence_length} tokens; answers of {config.gen_length} tokens in "
        f"{config.resolved_steps} steps ({config.algorithm}); {', '.join(can)}",
        *([skills_line(skills)] if skills else []),
        'type /help for commands, """ for a message of several lines; Ctrl-D or Ctrl-C twice leaves',
    ]


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
    with the embedded model (/examples shows what it can do). Type /help
    for the slash commands (/reset, /stats, /set KEY VALUE, /system TEXT,
    /save FILE, /examples, /exit). Ctrl-C cancels
    the answer being written; Ctrl-D, or Ctrl-C twice at the prompt, leaves.
    A message of several lines goes between \"\"\" lines (\"\"\" opens it, a line
    ending with \"\"\" sends it). With stdin piped, each line is one turn and
    only the answers are printed.
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
        for line in banner(loaded, session.config):
            echo_err(line)
        loop.run(terminal_lines(lambda: loop.prompt))
    else:
        loop.run(piped_lines(stdin))
