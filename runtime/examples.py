"""What the embedded model can do, with example phrasings and the answers it gives to them.

One list serves `/examples` in `unmask chat`, the chat banner's line of skills and the
README's table; `tests/test_examples.py` finds every example prompt of the README, the
`--help` texts and the chat banner, requires each to be listed here with its answer, and
runs each against the shipped model with the settings written beside it.

A package says it is such a model with its tasks.json (unmask.evaluate): the examples of
the families it declares apply to it; other packages have none. The phrasings are the
embedded model's own (unmask.tasks' templates): it does not understand other wordings yet
(issue 32; see the top-level README).
"""

from __future__ import annotations

import os
from typing import NamedTuple


class Example(NamedTuple):
    prompt: str
    answer: str


class Skill(NamedTuple):
    family: str  # the task family (unmask.tasks / unmask.people) the examples belong to
    name: str  # what the banner and /examples call it
    covers: str  # one line: what it takes
    examples: tuple[Example, ...]


def _timer(minutes: int) -> str:
    return '{"name":"set_timer","arguments":{"minutes":%d}}' % minutes


SKILLS = (
    Skill("tool_call", "tool calls", "timers, messages, calendar events, weather, thermostats, lights and devices", (
        Example("Set a timer for 5 minutes.", _timer(5)),
        Example("What's the weather in Lisbon tomorrow?",
                '{"name":"get_weather","arguments":{"city":"Lisbon","day":"tomorrow"}}'),
        Example("Turn off the kitchen lights.",
                '{"name":"set_device","arguments":{"device":"lights","room":"kitchen","state":"off"}}'),
        Example("Set the bedroom thermostat to 21 degrees.",
                '{"name":"set_thermostat","arguments":{"room":"bedroom","temperature":21}}'),
        Example('Message Anna "see you soon".', '{"name":"send_message","arguments":{"to":"Anna","text":"see you soon"}}'),
    )),
    Skill("arithmetic", "math", "sums, differences and products of whole numbers up to 999", (
        Example("What is 12 + 30?", "42"),
        Example("Compute 250 - 75.", "175"),
        Example("What is 7 + 5?", "12"),
        Example("What is 2 + 2?", "4"),
    )),
    Skill("list", "lists", "sort (numbers or words) and reverse", (
        Example("Sort these: 33, 12, 25", "12, 25, 33"),
        Example("Reverse: apple, pear, kiwi", "kiwi, pear, apple"),
        Example("Sort these: pear, apple, kiwi", "apple, kiwi, pear"),
    )),
    Skill("units", "units", "km/m, m/cm, kg/g, L/mL, hours/minutes/seconds, days/hours, feet/inches", (
        Example("Convert 5 km to m.", "5000 m"),
        Example("How many minutes is 3 hours?", "180 minutes"),
        Example("Convert 2 kg to g.", "2000 g"),
    )),
    Skill("extract", "texts", "who, which city, which day, which order and how much, from a text you paste", (
        Example("Context: Anna ordered item 4821 for 35 dollars. It ships to Oslo on Friday.\n"
                "Question: Which city is it going to?", "Oslo"),
    )),
)


def skills_for(families) -> tuple[Skill, ...]:
    """The skills of the task families a package declares (its tasks.json), in SKILLS' order."""
    declared = set(families)
    return tuple(skill for skill in SKILLS if skill.family in declared)


def package_skills(package_dir: str | os.PathLike) -> tuple[Skill, ...]:
    """The skills of a package folder: none unless its tasks.json declares task families."""
    from .errors import ModelFormatError
    from .evaluate import read_task_spec

    try:
        return skills_for(read_task_spec(package_dir).families)
    except ModelFormatError:
        return ()


def skills_line(skills) -> str:
    """The banner's line: what the model does, and where the phrasings are."""
    return f"it does {', '.join(skill.name for skill in skills)}; /examples shows how to ask"


def examples_text(skills) -> str:
    """What /examples prints: each skill, what it covers, and a few ways to ask."""
    if not skills:
        return "this package lists no examples (no tasks.json); its model card says what it can do"
    lines = []
    for skill in skills:
        lines.append(f"{skill.name}: {skill.covers}")
        for ex in skill.examples[:4]:  # a prompt of several lines as it is typed in chat: between """ lines
            lines += [f"  {line}" for line in (['"""', *ex.prompt.splitlines(), '"""'] if "\n" in ex.prompt
                                               else [ex.prompt])]
    return "\n".join(lines)


def all_examples(skills=SKILLS) -> dict[str, str]:
    """prompt -> answer over the examples of `skills` (each prompt is listed once)."""
    table: dict[str, str] = {}
    for ex in (ex for skill in skills for ex in skill.examples):
        if table.setdefault(ex.prompt, ex.answer) != ex.answer:
            raise AssertionError(f"example {ex.prompt!r} is listed with two answers")
    return table


__all__ = ["Example", "Skill", "SKILLS", "skills_for", "package_skills", "skills_line",
           "examples_text", "all_examples"]
