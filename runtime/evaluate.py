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

`heldout` picks the held-out set (unmask.people): "split" (the tasks' held-out split, the
default), "phrasing" (frames never trained on), "values" (slot values never trained on),
"followup" (split questions after 1-3 earlier turns, also scored alone: `report.alone`) or
"ood" (out-of-domain prompts; the answer is people.REFUSAL).

Settings: the package's generation defaults, then gen_length from tasks.json in one
block (how the tasks were trained), then the caller's config / overrides.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from . import people, tasks
from .config import GenerationConfig
from .errors import ConfigError, ModelFormatError
from .manifest import read_json_object
from .stats import TokenRates

TASKS_FILE = "tasks.json"
GENERATOR = "unmask.tasks"  # the only task generator this version knows
DEFAULT_LIMIT = 100  # held-out examples per run, balanced over the families
HELDOUT_SETS = ("split", *people.SETS)


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
        raise ModelFormatError(f"{path}: 'families' must be a non-empty list of names from {', '.join(people.FAMILIES)}")
    unknown = [f for f in families if f not in people.FAMILIES]
    if unknown:
        raise ModelFormatError(f"{path}: unknown families {unknown}; {GENERATOR} has {', '.join(people.FAMILIES)}")
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
    heldout: str = "split"  # the held-out set (HELDOUT_SETS)
    alone: list[Score] | None = None  # "followup": the same questions without their earlier turns, then overall

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
            "set": self.heldout,
            "loose": self.loose,
            "config": self.config.to_dict(),
            "families": {s.name: s.to_dict() for s in self.families},
            "overall": self.overall.to_dict(),
        }
        if self.alone is not None:
            out["alone"] = {s.name: s.to_dict() for s in self.alone}
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
             on_answer=None, follow_up: int = 0, loose: bool = False, heldout: str = "split",
             **overrides: Any) -> EvalReport:
    """Exact match of `model` on `limit` examples of held-out set `heldout` (HELDOUT_SETS).

    `model`: a loaded unmask.Model, a package folder, or None for the embedded model.
    `families`: a subset of those the package declares (default: all the set has). Settings: see
    the module doc; `config` is taken as complete, overrides are GenerationConfig fields.
    `on_answer(answer, index, count)` is called after every example (progress display).
    `follow_up`: earlier turns before each question (the next held-out examples of the run,
    any family, with their correct answers as the assistant's replies); 0 = single turn.
    `loose`: ask each question as people type in a chat (tasks.loosen: no final mark, lowercase
    start); the expected answers are the same.
    Raises ModelFormatError when the package has no tasks.json, ConfigError on unknown
    families, a bad limit, set or settings.
    """
    _check_arguments(limit, follow_up, loose, heldout)
    if model is None or isinstance(model, (str, os.PathLike)):
        from .model import load

        if model is not None:
            read_task_spec(model)  # fail before building a session
        model = load(model, device=device, threads=threads)
    spec = read_task_spec(model.package.folder)
    chosen = set_families(spec, heldout, families)
    cfg = (model.resolve_config(config, **overrides) if config is not None
           else model.resolve_config(**{**task_defaults(spec), **overrides}))
    examples = heldout_examples(heldout, limit, chosen)
    earlier = tasks.make_examples("heldout", max(limit, follow_up + 1), seed=1) if follow_up else []
    answers = []
    for index, example in enumerate(examples):
        turns = [(ex.prompt, ex.answer) for ex in (earlier[(index + k) % len(earlier)] for k in range(follow_up))]
        answers.append(_ask(model, cfg, example, turns + list(example.history), loose))
        if on_answer is not None:
            on_answer(answers[-1], index, len(examples))
    alone = None
    if heldout == "followup":  # the comparison the follow-ups are judged against
        asked = [_ask(model, cfg, example, [], loose) for example in examples]
        alone = [*(total(f, [a for a in asked if a.family == f]) for f in chosen), total("overall", asked)]
    scores = [total(f, [a for a in answers if a.family == f]) for f in chosen]
    return EvalReport(str(model.package.folder), model.manifest.precision, cfg, scores, total("overall", answers),
                      answers, loose, heldout, alone)


def _check_arguments(limit, follow_up, loose, heldout) -> None:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ConfigError(f"limit must be a positive integer, got {limit!r}")
    if isinstance(follow_up, bool) or not isinstance(follow_up, int) or not 0 <= follow_up <= 8:
        raise ConfigError(f"follow_up is the number of earlier chat turns, 0 to 8; got {follow_up!r}")
    if not isinstance(loose, bool):
        raise ConfigError(f"loose is True or False, got {loose!r}")
    if heldout not in HELDOUT_SETS:
        raise ConfigError(f"unknown held-out set {heldout!r}; choose one of {', '.join(HELDOUT_SETS)}")
    if heldout == "followup" and follow_up:
        raise ConfigError("the followup set brings its own earlier turns (1 to 3); leave follow_up at 0 with it")


def _ask(model, cfg: GenerationConfig, example: tasks.Example, turns: list[tuple[str, str]], loose: bool) -> Answer:
    messages = [{"role": role, "content": text} for user, reply in turns
                for role, text in (("user", user), ("assistant", reply))]
    question = tasks.loosen(example.prompt) if loose else example.prompt
    result = model.generate(messages=messages + [{"role": "user", "content": question}], config=cfg)
    stats = result.stats
    return Answer(example.family, question, example.answer, result.text,
                  tasks.exact_match(result.text, example.answer), stats.nfe, stats.tokens, stats.total_seconds)


def set_families(spec: TaskSpec, heldout: str, requested: Iterable[str] | None) -> tuple[str, ...]:
    """The families of held-out set `heldout` to evaluate: those the package declares that the set
    has (or the requested ones, checked). The ood set is asked of every package: refusing what it
    cannot do is what it is measured on, trained for it or not."""
    if heldout == "ood":
        requested = tuple(requested or ("ood",))
        if tuple(dict.fromkeys(requested)) != ("ood",):
            raise ConfigError(f"the ood set has only ood questions; drop --family {', '.join(requested)}")
        return ("ood",)
    has = tasks.FAMILIES if heldout == "split" else people.SET_FAMILIES[heldout]
    if not requested:
        chosen = tuple(f for f in spec.families if f in has)
        if not chosen:
            raise ConfigError(f"the {heldout} set has {', '.join(has)} questions; this package declares none of them")
        return chosen
    chosen = choose_families(spec, requested)
    outside = [f for f in chosen if f not in has]
    if outside:
        raise ConfigError(f"the {heldout} set has no {', '.join(outside)} questions; it has {', '.join(has)}")
    return chosen


def heldout_examples(heldout: str, limit: int, families: Sequence[str]) -> list[tasks.Example]:
    try:
        if heldout == "split":
            return tasks.make_examples("heldout", limit, families=families)
        return people.make_set(heldout, limit, families)
    except ValueError as exc:  # more than the held-out split holds (unit conversions run out first)
        raise ConfigError(f"limit {limit} asks for more held-out examples than the {heldout} set has ({exc}); "
                          f"use a smaller limit or other families") from None


def format_table(report: EvalReport) -> str:
    """Per-family rows and the overall row, aligned for a terminal."""
    header = f"{'family':<12} {'n':>4} {'accuracy':>9} {'tok/fwd':>8} {'tok/s':>8}"
    rows = [header, "-" * len(header)]
    groups = [("", [*report.families, report.overall])]
    if report.alone is not None:
        groups.append(("the same questions asked alone:", report.alone))
    for title, scores in groups:
        rows += [title] if title else []
        rows += [f"{score.name:<12} {score.examples:>4} {score.accuracy:>8.1%} "
                 f"{score.tokens_per_forward:>8.2f} {score.tokens_per_second:>8.1f}" for score in scores]
    return "\n".join(rows)


__all__ = ["TASKS_FILE", "GENERATOR", "DEFAULT_LIMIT", "HELDOUT_SETS", "set_families", "heldout_examples", "TaskSpec",
           "read_task_spec", "write_task_spec", "choose_families", "Score", "Answer", "EvalReport", "evaluate", "task_defaults", "format_table"]
