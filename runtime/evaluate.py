"""Exact-match evaluation of a model package on the held-out split of its training tasks.

A package says which task families it was trained on in a small `tasks.json` beside
its manifest (the embedded model has one):

    {"generator": "unmask.tasks", "families": ["tool_call", "arithmetic", ...], "gen_length": 40}

`evaluate` draws held-out examples from unmask.tasks (deterministic, never seen in
training), asks each one as a single user turn through the package's chat template
(or, with follow_up=N, as the last turn of a chat after N earlier answered held-out
questions, as `unmask chat` asks a follow-up), and scores the answers by exact match,
per family and overall, together with what the decoding cost: tokens per forward pass
and tokens per second.

    from unmask.evaluate import evaluate
    report = evaluate(None, limit=50, threshold=0.9)     # the embedded model
    report.overall.accuracy, report.family("tool_call").tokens_per_forward

Settings: the package's generation defaults, then gen_length from tasks.json in one
block (how the tasks were trained), then the caller's config / overrides.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from . import tasks
from .config import GenerationConfig
from .errors import ConfigError, ModelFormatError
from .manifest import read_json_object
from .stats import TokenRates

TASKS_FILE = "tasks.json"
GENERATOR = "unmask.tasks"  # the only task generator this version knows
DEFAULT_LIMIT = 100  # held-out examples per run, balanced over the families


# ---------------------------------------------------------------------- what a package can be evaluated on


@dataclass(frozen=True)
class TaskSpec:
    """Contents of a package's tasks.json: the task families its checkpoint was trained on."""

    families: tuple[str, ...]
    gen_length: int  # generation region the answers were trained in (answer + EoT + EOS padding)
    generator: str = GENERATOR

    def to_dict(self) -> dict[str, Any]:
        return {"generator": self.generator, "families": list(self.families), "gen_length": self.gen_length}


def no_tasks_message(folder: Path) -> str:
    return (
        f"{folder} declares no task families ({TASKS_FILE} not found), so `unmask eval` can evaluate nothing "
        f"in it. The embedded model can be evaluated (`unmask eval` without a package); a package exported "
        f"from a checkpoint trained on unmask.tasks can be evaluated once its folder has a {TASKS_FILE} such as "
        f'{{"generator": "{GENERATOR}", "families": ["tool_call", "arithmetic"], "gen_length": {tasks.GEN_LENGTH}}} '
        f"(in an unmask checkout, `python -m training.ship_default CHECKPOINT --out OUT` writes one)"
    )


def read_task_spec(package_dir: str | os.PathLike) -> TaskSpec:
    """Read `package_dir/tasks.json`; ModelFormatError when it is missing or malformed."""
    folder = Path(package_dir)
    path = folder / TASKS_FILE
    if not path.is_file():
        raise ModelFormatError(no_tasks_message(folder))
    raw = read_json_object(path)
    generator = raw.get("generator")
    if generator != GENERATOR:
        raise ModelFormatError(f"{path}: generator {generator!r} is unknown; this unmask evaluates {GENERATOR!r}")
    families = raw.get("families")
    if not isinstance(families, list) or not families or not all(isinstance(f, str) for f in families):
        raise ModelFormatError(f"{path}: 'families' must be a non-empty list of names from {', '.join(tasks.FAMILIES)}")
    unknown = [f for f in families if f not in tasks.FAMILIES]
    if unknown:
        raise ModelFormatError(f"{path}: unknown families {unknown}; {GENERATOR} has {', '.join(tasks.FAMILIES)}")
    gen_length = raw.get("gen_length")
    if isinstance(gen_length, bool) or not isinstance(gen_length, int) or gen_length < 1:
        raise ModelFormatError(f"{path}: 'gen_length' must be a positive integer, got {gen_length!r}")
    return TaskSpec(tuple(dict.fromkeys(families)), gen_length, generator)


def write_task_spec(spec: TaskSpec, package_dir: str | os.PathLike) -> Path:
    path = Path(package_dir) / TASKS_FILE
    path.write_text(json.dumps(spec.to_dict(), indent=2) + "\n", encoding="utf-8")
    return path


def choose_families(spec: TaskSpec, requested: Iterable[str] | None) -> tuple[str, ...]:
    """The families to evaluate: all the package declares, or the requested ones (checked)."""
    if not requested:
        return spec.families
    chosen = tuple(dict.fromkeys(requested))
    unknown = [f for f in chosen if f not in spec.families]
    if unknown:
        raise ConfigError(f"unknown task family {', '.join(map(repr, unknown))}; this package can be evaluated on "
                          f"{', '.join(spec.families)}")
    return chosen


# ---------------------------------------------------------------------- results


@dataclass(frozen=True)
class Score(TokenRates):
    """Exact match and decoding cost over a group of examples (one family, or all)."""

    name: str  # family name, or "overall"
    examples: int
    correct: int
    nfe: int  # forward passes, summed
    tokens: int  # positions committed by the steps, summed
    seconds: float  # generation wall time (GenerationStats.total_seconds), summed

    @property
    def accuracy(self) -> float:
        return self.correct / self.examples if self.examples else 0.0

    @property
    def total_seconds(self) -> float:  # the name TokenRates reads; "seconds" stays the JSON key
        return self.seconds

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "accuracy": self.accuracy, "tokens_per_forward": self.tokens_per_forward,
                "tokens_per_second": self.tokens_per_second}


@dataclass(frozen=True)
class Answer:
    """One held-out example and what the model said."""

    family: str
    prompt: str
    answer: str
    prediction: str
    correct: bool
    nfe: int
    tokens: int
    seconds: float


@dataclass
class EvalReport:
    package: str  # folder of the evaluated package
    precision: str
    config: GenerationConfig  # the resolved settings every example ran with
    families: list[Score]  # in evaluation order
    overall: Score
    answers: list[Answer]
    loose: bool = False  # questions typed loosely (tasks.loosen)

    def family(self, name: str) -> Score:
        for score in self.families:
            if score.name == name:
                return score
        raise KeyError(name)

    def to_dict(self, *, answers: bool = False) -> dict[str, Any]:
        """The JSON document of `unmask eval --json` (answers only when asked: they are long)."""
        out = {
            "package": self.package,
            "precision": self.precision,
            "split": "heldout",
            "loose": self.loose,
            "config": self.config.to_dict(),
            "families": {s.name: s.to_dict() for s in self.families},
            "overall": self.overall.to_dict(),
        }
        if answers:
            out["answers"] = [asdict(a) for a in self.answers]
        return out


def total(name: str, answers: Sequence[Answer]) -> Score:
    return Score(name, len(answers), sum(a.correct for a in answers), sum(a.nfe for a in answers),
                 sum(a.tokens for a in answers), sum(a.seconds for a in answers))


# ---------------------------------------------------------------------- evaluation


def task_defaults(spec: TaskSpec) -> dict[str, Any]:
    """The settings the tasks were trained with, between the package's defaults and the caller's:
    their gen_length, in one block."""
    return {"gen_length": spec.gen_length, "block_length": None}


def evaluate(model=None, *, families: Iterable[str] | None = None, limit: int = DEFAULT_LIMIT,
             config: GenerationConfig | None = None, device: str = "auto", threads: int | None = None,
             on_answer=None, follow_up: int = 0, loose: bool = False, **overrides: Any) -> EvalReport:
    """Exact match of `model` on `limit` held-out examples of its task families.

    `model`: a loaded unmask.Model, a package folder, or None for the embedded model.
    `families`: a subset of those the package declares (default: all). Settings: see the
    module doc; `config` is taken as complete, overrides are GenerationConfig fields.
    `on_answer(answer, index, count)` is called after every example (progress display).
    `follow_up`: earlier turns before each question (the next held-out examples of the run,
    any family, with their correct answers as the assistant's replies); 0 = single turn.
    `loose`: ask each question as people type in a chat (tasks.loosen: no final mark, lowercase
    start); the expected answers are the same.
    Raises ModelFormatError when the package has no tasks.json, ConfigError on unknown
    families, a bad limit or bad settings.
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ConfigError(f"limit must be a positive integer, got {limit!r}")
    if isinstance(follow_up, bool) or not isinstance(follow_up, int) or not 0 <= follow_up <= 8:
        raise ConfigError(f"follow_up is the number of earlier chat turns, 0 to 8; got {follow_up!r}")
    if not isinstance(loose, bool):
        raise ConfigError(f"loose is True or False, got {loose!r}")
    if model is None or isinstance(model, (str, os.PathLike)):
        from .model import load

        if model is not None:
            read_task_spec(model)  # fail before building a session
        model = load(model, device=device, threads=threads)
    spec = read_task_spec(model.package.folder)
    chosen = choose_families(spec, families)
    cfg = (model.resolve_config(config, **overrides) if config is not None
           else model.resolve_config(**{**task_defaults(spec), **overrides}))
    try:
        examples = tasks.make_examples("heldout", limit, families=chosen)
    except ValueError as exc:  # more than the held-out split holds (unit conversions run out first)
        raise ConfigError(f"limit {limit} asks for more held-out examples than the split has ({exc}); "
                          f"use a smaller limit or other families") from None
    earlier = tasks.make_examples("heldout", max(limit, follow_up + 1), seed=1) if follow_up else []
    answers = []
    for index, example in enumerate(examples):
        turns = [earlier[(index + k) % len(earlier)] for k in range(follow_up)]
        messages = [{"role": role, "content": text} for ex in turns
                    for role, text in (("user", ex.prompt), ("assistant", ex.answer))]
        question = tasks.loosen(example.prompt) if loose else example.prompt
        result = model.generate(messages=messages + [{"role": "user", "content": question}], config=cfg)
        stats = result.stats
        answer = Answer(example.family, question, example.answer, result.text,
                        tasks.exact_match(result.text, example.answer), stats.nfe, stats.tokens, stats.total_seconds)
        answers.append(answer)
        if on_answer is not None:
            on_answer(answer, index, len(examples))
    scores = [total(f, [a for a in answers if a.family == f]) for f in chosen]
    return EvalReport(str(model.package.folder), model.manifest.precision, cfg, scores, total("overall", answers),
                      answers, loose)


def format_table(report: EvalReport) -> str:
    """Per-family rows and the overall row, aligned for a terminal."""
    header = f"{'family':<12} {'n':>4} {'accuracy':>9} {'tok/fwd':>8} {'tok/s':>8}"
    rows = [header, "-" * len(header)]
    for score in [*report.families, report.overall]:
        rows.append(f"{score.name:<12} {score.examples:>4} {score.accuracy:>8.1%} "
                    f"{score.tokens_per_forward:>8.2f} {score.tokens_per_second:>8.1f}")
    return "\n".join(rows)


__all__ = ["TASKS_FILE", "GENERATOR", "DEFAULT_LIMIT", "TaskSpec", "read_task_spec", "write_task_spec",
           "choose_families", "Score", "Answer", "EvalReport", "evaluate", "task_defaults", "format_table"]
