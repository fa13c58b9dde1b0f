"""`unmask eval [PKG]`: exact-match accuracy on the held-out tasks (runtime/evaluate.py does the work)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from .. import evaluate as evaluation
from .options import check_model_path, echo_err, generation_options, open_model, pop_overrides, prepare, resolve_model

EXAMPLES = """\b
Examples:
  unmask eval                                   # the embedded model, 100 held-out examples
  unmask eval --family tool_call --limit 40 --threshold 0.9 --cache dual
  unmask eval ./my-int4 --cache none --steps 40 --json > eval.json
  unmask eval --follow-up 2                     # each question after two earlier chat turns
  unmask eval --loose                           # questions typed loosely: "what is 7 + 5"
  unmask eval --set phrasing --limit 50         # wordings never trained on
  unmask eval --set followup                    # after 1-3 earlier turns, and the same questions alone
  unmask eval --set ood                         # "Hello, who are you?": answered with the fixed sentence?
"""


def _families(values: tuple[str, ...]) -> list[str]:
    """--family a --family b, or --family a,b."""
    return [name.strip() for value in values for name in value.split(",") if name.strip()]


@click.command("eval", epilog=EXAMPLES)
@click.argument("package", required=False, type=click.Path(path_type=Path))
@click.option("--family", "families", multiple=True, metavar="NAME",
              help="Task family to evaluate (repeat, or a comma list) [default: every family the package declares].")
@click.option("--limit", type=click.IntRange(min=1), default=evaluation.DEFAULT_LIMIT, show_default=True,
              help="Held-out examples in all, spread evenly over the families.")
@click.option("--json", "as_json", is_flag=True, help="Print the scores, settings and costs as one JSON document.")
@click.option("--answers", is_flag=True, help="With --json: also list every prompt, answer and prediction.")
@click.option("--follow-up", type=click.IntRange(0, 8), default=0, show_default=True, metavar="N",
              help="Ask each question after N earlier answered chat turns, as a follow-up in `unmask chat`.")
@click.option("--loose", is_flag=True,
              help="Ask each question as people type in a chat: no final punctuation, lowercase first letter.")
@click.option("--set", "heldout", type=click.Choice(evaluation.HELDOUT_SETS), default="split", show_default=True,
              help="Held-out set: split (the tasks' held-out split), phrasing (wordings never trained on), values "
                   "(slot values never trained on), followup (after 1-3 earlier turns; also scored alone), "
                   "ood (out-of-domain prompts, answered with the fixed sentence).")
@generation_options
def command(package, families, limit, as_json, answers, follow_up, loose, heldout, device, threads, verbose, **flags):
    """Score a package by exact match on held-out examples of the tasks it was trained on.

    PKG is a package folder with a tasks.json naming its task families; without it
    the embedded model is evaluated. Each family reports its accuracy, tokens per
    forward pass and tokens per second, then the overall row. Every generation
    setting has a flag (--threshold 0.9, --cache none, ...); the generation length
    defaults to the one the tasks were trained with (tasks.json), in one block.
    """
    overrides = pop_overrides(flags)
    if answers and not as_json:
        raise click.UsageError("--answers adds the predictions to the --json document; add --json")
    package = resolve_model(package)  # a name in the model store -> its folder
    if package is not None:  # say what is missing before building a session
        check_model_path(package)
        evaluation.read_task_spec(package)
    loaded = open_model(package, device, threads)
    spec = evaluation.read_task_spec(loaded.package.folder)
    chosen = evaluation.set_families(spec, heldout, _families(families))
    config = prepare(loaded, overrides, verbose=verbose, defaults=evaluation.task_defaults(spec),
                     heading=f"settings (gen_length from {evaluation.TASKS_FILE}, in one block):")
    progress = _progress if sys.stderr.isatty() and not as_json else None
    report = evaluation.evaluate(loaded, families=chosen, limit=limit, config=config, on_answer=progress,
                                 follow_up=follow_up, loose=loose, heldout=heldout)
    if progress is not None:
        echo_err("")
    if as_json:
        click.echo(json.dumps(report.to_dict(answers=answers), indent=2))
        return
    phrasing = " typed loosely" if report.loose else ""
    kind = "" if report.heldout == "split" else f" of the {report.heldout} set"
    click.echo(f"{report.package} ({report.precision}), {report.overall.examples} held-out examples{kind}{phrasing}, "
               f"{_settings_line(report.config)}")
    click.echo(evaluation.format_table(report))


def _progress(answer, index: int, count: int) -> None:
    click.echo(f"\r  {index + 1}/{count}", nl=False, err=True)


def _settings_line(config) -> str:
    rule = f"threshold {config.threshold}" if config.threshold is not None else (
        f"factor {config.factor}" if config.factor is not None else f"steps {config.resolved_steps}")
    return (f"{config.algorithm}, gen_length {config.gen_length}, block {config.resolved_block_length}, "
            f"{rule}, cache {config.cache}")
