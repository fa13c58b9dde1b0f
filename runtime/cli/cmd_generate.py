"""`unmask generate [MODEL] -p TEXT`: one answer, then exit (for scripts and pipes)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from ..errors import ConfigError
from .options import echo_err, generation_options, open_model, pop_overrides, prepare, provider_of
from .render import make_view


def _read_prompt(prompt: str | None, file: Path | None) -> str:
    if (prompt is None) == (file is None):
        raise click.UsageError("give the prompt with exactly one of -p/--prompt TEXT or --file PATH "
                               "(--file - reads stdin)")
    if file is None:
        return prompt
    try:
        return sys.stdin.read() if str(file) == "-" else file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{file}: cannot read the prompt ({exc})") from exc


EXAMPLES = """\b
Examples:
  unmask generate -p "What is 12 + 30?"
  unmask generate ./llada-int4 -p "Write a haiku" --gen-length 64 --threshold 0.9
  unmask generate ./dream-int4 --file prompt.txt --algorithm entropy --steps 32 --json
  echo "Sort these: 33, 12, 25" | unmask generate --file - --stream --verbose
"""


@click.command("generate", epilog=EXAMPLES)
@click.argument("model", required=False, type=click.Path(path_type=Path))
@click.option("-p", "--prompt", help="The prompt text (one user turn when the package has a chat template).")
@click.option("--file", type=click.Path(path_type=Path, dir_okay=False, allow_dash=True),
              help="Read the prompt from a file ('-' = stdin).")
@click.option("--system", help="System prompt (packages with a chat template).")
@click.option("--raw", is_flag=True, help="Use the prompt as is, without the chat template.")
@click.option("--json", "as_json", is_flag=True, help="Print text, token ids, settings and stats as JSON.")
@click.option("--per-step", is_flag=True, help="With --json: add the per-step lists (seconds, window lengths, ...).")
@click.option("--stream/--no-stream", default=False, help="Print each block as soon as it is finished.")
@click.option("--visual", is_flag=True, help="Redraw the whole answer in place while it denoises (terminal only).")
@generation_options
def command(model, prompt, file, system, raw, as_json, per_step, stream, visual, device, threads, verbose,
            **flags):
    """Generate one answer for a prompt and print it.

    MODEL is a package folder made by `unmask export`; without it the embedded
    model answers. Every generation setting has a flag of the same name
    (gen_length -> --gen-length); `none` clears an optional one.
    """
    overrides = pop_overrides(flags)
    if as_json and (stream or visual):
        raise click.UsageError("--json prints one document at the end; drop --stream/--visual")
    if per_step and not as_json:
        raise click.UsageError("--per-step adds to the --json document; give --json too")
    if raw and system is not None:
        raise click.UsageError("--raw sends the prompt without the chat template, so --system cannot apply")
    text = _read_prompt(prompt, file)
    loaded = open_model(model, device, threads)
    config = prepare(loaded, overrides, verbose=verbose)
    if raw:
        source = {"prompt_ids": loaded.tokenizer.encode(text, add_special_tokens=True)}
    elif system is not None:
        source = {"messages": [{"role": "system", "content": system}, {"role": "user", "content": text}]}
    else:
        source = {"prompt": text}
    events = loaded.stream(**source, config=config)
    out = sys.stdout
    view = None
    if not as_json:
        view = make_view(out, stream=stream, visual=visual, decode=loaded.tokenizer.decode, warn=echo_err)
        view.start(config)
    result = None
    try:
        for event in events:
            if view is not None:
                view.event(event)
            result = event.result or result
    except KeyboardInterrupt:
        if view is not None:
            view.cancel()
        raise
    if as_json:
        click.echo(json.dumps({
            "text": result.text,
            "token_ids": [int(t) for t in result.token_ids],
            "prompt_length": int(len(result.prompt_ids)),
            "config": result.config.to_dict(),
            "stats": result.stats.to_dict(per_step=per_step),
            "device": {"provider": provider_of(loaded), "threads": loaded.threads},
        }, indent=2))
    else:
        view.finish(result.text)
