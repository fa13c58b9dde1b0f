"""Shared click options: every GenerationConfig field as a flag, and back.

One name everywhere: the flag `--gen-length` is the field `gen_length` is the
`/set gen_length` key of `unmask chat`. Flags default to "not given", so only
what the user typed overrides the package's defaults; `none` clears an optional
field (`--threshold none`). Types, choices and help text are read from
GenerationConfig itself (its annotations, its algorithm/cache tuples and each
field's `metadata["help"]`), so nothing here repeats a default.
"""

from __future__ import annotations

import functools
import os
import types
import typing
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

import click

from ..config import ALGORITHMS, CACHE_MODES, GenerationConfig, ModelFacts
from ..errors import ConfigError, ModelFormatError
from ..store import resolve as resolve_model

if TYPE_CHECKING:  # unmask.model loads onnxruntime: only once a command opens a model
    from ..model import Model

CHOICES: dict[str, tuple[str, ...]] = {"algorithm": ALGORITHMS, "cache": CACHE_MODES}
NONE_WORDS = ("none", "off", "null")

# Settings the C++ core reads under one of the two schedules only (csrc/scoring.cpp, policy.cpp);
# under the other they change nothing.
_TIMESTEP_ONLY = ("top_k", "top_p", "alg_temp", "eps")  # Dream token sampler / timestep schedule
_BLOCK_ONLY = ("confidence_eos_eot_inf",)  # LLaDA block schedule


# ---------------------------------------------------------------------- field metadata


@dataclass(frozen=True)
class Setting:
    """One GenerationConfig field as the CLI sees it."""

    name: str
    kind: type  # int, float, str or bool
    optional: bool  # the field accepts None
    choices: tuple[str, ...] | None
    help: str

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def parse(self, text: str) -> Any:
        """Text (a flag value, a `/set` argument) -> a value of this field's type."""
        word = text.strip()
        if self.choices is not None and word in self.choices:  # cache "none" is a mode, not None
            return word
        if self.optional and word.lower() in (*NONE_WORDS, "auto"):
            return None
        if self.choices is not None:
            extra = " (or auto)" if self.optional else ""
            raise ConfigError(f"{self.name}: {word!r} is not one of {', '.join(self.choices)}{extra}")
        if self.kind is bool:
            lowered = word.lower()
            if lowered in ("1", "true", "yes", "on"):
                return True
            if lowered in ("0", "false", "no", "off"):
                return False
            raise ConfigError(f"{self.name}: expected true or false, got {word!r}")
        try:
            return self.kind(word)
        except ValueError:
            kind = "an integer" if self.kind is int else "a number" if self.kind is float else "text"
            extra = " or none" if self.optional else ""
            raise ConfigError(f"{self.name}: expected {kind}{extra}, got {word!r}") from None


def _kind(annotation: Any) -> tuple[type, bool]:
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return inner[0], len(inner) < len(args)
    return annotation, False


@functools.cache
def settings() -> dict[str, Setting]:
    """Every GenerationConfig field, in declaration order."""
    hints = typing.get_type_hints(GenerationConfig)
    out = {}
    for f in fields(GenerationConfig):
        kind, optional = _kind(hints[f.name])
        out[f.name] = Setting(f.name, kind, optional, CHOICES.get(f.name), f.metadata["help"])
    return out


def parse_setting(name: str, text: str) -> tuple[str, Any]:
    """`/set KEY VALUE`: accept `gen-length` or `gen_length`; unknown keys list the valid ones."""
    key = name.strip().lstrip("-").replace("-", "_")
    table = settings()
    if key not in table:
        raise ConfigError(f"unknown setting {name!r}; valid settings: {', '.join(table)}")
    return key, table[key].parse(text)


# ---------------------------------------------------------------------- click decorators


class _SettingType(click.ParamType):
    """A click type that parses with Setting.parse, so flags and /set agree on every value."""

    def __init__(self, setting: Setting):
        self.setting = setting
        self.name = "|".join(setting.choices) if setting.choices else setting.kind.__name__.upper()
        if setting.optional:
            self.name += "|auto" if setting.choices else "|none"

    def get_metavar(self, param, *args, **kwargs):
        if self.setting.choices:  # lower case, as click.Choice shows them
            return "[" + self.name + "]"
        return self.name

    def convert(self, value, param, ctx):
        if not isinstance(value, str):
            return value
        try:
            parsed = self.setting.parse(value)
        except ConfigError as exc:
            self.fail(str(exc).split(": ", 1)[-1], param, ctx)
        return _CLEARED if parsed is None else parsed

    def shell_complete(self, ctx, param, incomplete):
        from click.shell_completion import CompletionItem

        return [CompletionItem(c) for c in self.setting.choices or () if c.startswith(incomplete)]


class _Cleared:
    """`--threshold none`: explicitly set to None (distinct from 'flag not given')."""

    def __repr__(self) -> str:
        return "none"


_CLEARED = _Cleared()


def _setting_option(s: Setting) -> Callable:
    if s.kind is bool:
        return click.option(f"{s.flag}/--no-{s.flag[2:]}", s.name, default=None, help=s.help)
    return click.option(s.flag, s.name, type=_SettingType(s), default=None, help=s.help)


def generation_options(func: Callable | None = None, *, exclude: Iterable[str] = ()) -> Callable:
    """Add one flag per GenerationConfig setting plus --device, --threads and --verbose.

    `exclude` leaves out settings a command gives another meaning (bench's comparison lists).
    """
    if func is None:
        return lambda f: generation_options(f, exclude=exclude)
    skip = set(exclude)
    options = [_setting_option(s) for s in settings().values() if s.name not in skip]
    options += [
        click.option("--device", default="auto", show_default=True,
                     help="Execution provider: auto, cpu, cuda, dml, coreml (see `unmask devices`)."),
        click.option("--threads", type=int, default=None,  # checked by unmask.load, the one thread-count rule
                     help="CPU threads for ONNX Runtime and the decoder [default: the device profile's]."),
        click.option("-v", "--verbose", is_flag=True, help="Print the resolved settings before running."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def pop_overrides(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Remove the setting flags from a command's kwargs; return those the user gave."""
    overrides = {}
    for name in settings():
        value = kwargs.pop(name, None)
        if value is not None:
            overrides[name] = None if value is _CLEARED else value
    return overrides


# ---------------------------------------------------------------------- resolving


def ineffective(config: GenerationConfig, names: Iterable[str], *, architecture: str | None = None,
                cache_reuse: bool = True) -> list[str]:
    """One line per given setting that changes nothing for this model and algorithm (never ignored silently)."""
    notes = []
    schedule = "block schedule" if config.uses_block_schedule else "timestep schedule"
    family = f"{architecture}, " if architecture else ""
    for name in names:
        flag = "--" + name.replace("_", "-")
        if name in _TIMESTEP_ONLY and config.uses_block_schedule:
            notes.append(f"{flag} has no effect here ({family}algorithm {config.algorithm} uses the {schedule}); "
                         f"it applies to {', '.join(a for a in ALGORITHMS if a not in ('low_confidence', 'random'))}")
        elif name in _BLOCK_ONLY and not config.uses_block_schedule:
            notes.append(f"{flag} has no effect here ({family}algorithm {config.algorithm} uses the {schedule}); "
                         f"it applies to low_confidence, random")
        elif name == "alg_temp" and (config.threshold is not None or config.factor is not None):
            notes.append(f"{flag} has no effect with --threshold/--factor (positions are chosen by the rule, "
                         f"not drawn)")
        elif name == "cache" and config.cache not in (None, "none") and not cache_reuse:
            notes.append(f"--cache {config.cache} has no effect: this package's graph has no key/value inputs "
                         f"(exported from torch), so it runs with cache none")
    return notes


def describe(config: GenerationConfig, package_defaults: Mapping[str, Any], overrides: Mapping[str, Any],
             facts: ModelFacts | None = None) -> str:
    """The resolved settings, one per line, each with where its value came from (for --verbose),
    then the model's facts."""
    values = {**config.to_dict(), **(facts.to_dict() if facts is not None else {})}
    lines = []
    width = max(map(len, values))
    for name, value in values.items():
        if name in overrides:
            source = "flag"
        elif name not in GenerationConfig.field_names():
            source = "model"
        elif name in package_defaults:
            source = "package"
        else:
            source = "default"
        if value is None:
            shown = "auto" if name in CHOICES else "none"  # cache None = auto, not the mode "none"
        else:
            shown = str(value).lower() if isinstance(value, bool) else str(value)
        derived = ""
        if name == "steps" and value is None:
            derived = f" (= gen_length {config.gen_length})"
        elif name == "block_length" and value is None:
            derived = f" (= gen_length {config.gen_length})"
        lines.append(f"  {name:<{width}}  {shown}{derived}  [{source}]")
    return "\n".join(lines)


# ---------------------------------------------------------------------- model location


def check_model_path(path: str | os.PathLike | None) -> None:
    """Fail early, with the fix, when MODEL is not a package (a missing folder, an HF checkpoint)."""
    if path is None:
        return
    folder = Path(path)
    export_hint = f"create one with `unmask export HF_CHECKPOINT_DIR {folder}`"
    if not folder.exists():
        raise ModelFormatError(f"{folder}: no such model package; {export_hint}")
    if folder.is_dir() and not (folder / "unmask.json").is_file():
        if (folder / "config.json").is_file():
            raise ModelFormatError(
                f"{folder}: this is a checkpoint folder, not an unmask package; "
                f"convert it with `unmask export {folder} OUT_DIR`"
            )
        raise ModelFormatError(f"{folder}: unmask.json not found, so this is not a model package; {export_hint}")


def echo_err(message: str) -> None:
    click.echo(message, err=True)


# ---------------------------------------------------------------------- model + settings, once per command


def open_model(path: str | os.PathLike | None, device: str, threads: int | None, **options: Any):
    """unmask.load with the CLI's friendlier checks first (a missing path suggests `unmask export`);
    `options` are load()'s keyword-only ones (profile_prefix)."""
    path = resolve_model(path)  # a name in the model store -> its folder
    check_model_path(path)
    from ..model import load

    return load(path, device=device, threads=threads, **options)


def prepare(model: Model, overrides: Mapping[str, Any], *, verbose: bool, defaults: Mapping[str, Any] | None = None,
            heading: str = "settings:") -> GenerationConfig:
    """Resolve the settings once per command: reject contradictions, report flags with no effect,
    print them with -v. `defaults` go between the package's and the flags (eval's task length)."""
    defaults = dict(defaults or {})
    config = model.resolve_config(**{**defaults, **overrides})
    for note in ineffective(config, overrides, architecture=model.manifest.architecture,
                            cache_reuse=model.cache_reuse):
        echo_err(f"note: {note}")
    if verbose:
        echo_err(f"model: {model_label(model)}")
        echo_err(heading)
        echo_err(describe(config, {**model.manifest.generation, **defaults}, overrides, model.facts))
    return config


def model_label(model: Model) -> str:
    m = model.manifest
    return (f"{model.package.folder} ({m.architecture}, {m.precision}) on {provider_of(model)}, "
            f"{model.threads} threads")


def provider_of(model: Model) -> str:
    """The execution provider the model's session runs on (the first of its list)."""
    return model.engine.session.get_providers()[0]
