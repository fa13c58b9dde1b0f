"""People-typed tasks: the unmask.tasks families asked the way people type in a chat, an
out-of-domain family, conversations, and the held-out sets that measure generalisation.

A prompt is composed per intent: a frame (many verbs and orders), an opener or closer
(politeness, fillers), typing noise on the frame's own words (lowercase start, missing or
extra punctuation, "whats", "pls", "min", "12+30" without spaces) and slot values from
unmask.people_values (large lists and made-up values). Training draws alone may also get
filler words (people_frames.FILLERS) in place of a leading verb or between fixed words, and some
training ood prompts are fillers alone, so the model reads the intent from the slots and a few
key words rather than from a frame's exact wording. Answers are the tasks' answers
(JSON tool calls, numbers, lists, "5000 m"); questions out of the domain, and unit pairs
with no whole-number factor such as km and miles, get REFUSAL.

Held-out sets, each deterministic and disjoint from training by construction:
  phrasing   frames and openers never used in training (HELDOUT_* below), training values
  values     training phrasings, slot values never drawn in training (people_values.NOVEL)
  followup   held-out split questions after 1-3 earlier answered turns (the same questions
             alone are the comparison)
  ood        out-of-domain prompts from held-out frames; the answer is REFUSAL
The fourth, "split", is unmask.tasks' held-out split; every training prompt here is one
tasks.split_of puts in "train", so it stays unseen too.

    train = iter_train(seed=0)                    # endless training examples, 0-3 earlier turns
    examples = make_set("phrasing", 100)          # balanced over the set's families
"""

from __future__ import annotations

import random
import re
from dataclasses import replace
from typing import Iterable, Iterator

from . import tasks
from .people_frames import FILLERS, FRAMES, HELDOUT_OPENERS, OPENERS, Frame
from .people_values import TRAIN_ONSETS, article, made_up, value

REFUSAL = "Sorry, I can only do tool calls, math, lists, units and texts."  # 28 tokens: fits GEN_LENGTH
FAMILIES = (*tasks.FAMILIES, "ood")
SETS = ("phrasing", "values", "followup", "ood")
SET_FAMILIES = {"phrasing": tasks.FAMILIES, "values": ("tool_call", "list", "extract"),
                "followup": tasks.FAMILIES, "ood": ("ood",)}
SET_SEEDS = {"phrasing": 2_000_003, "values": 3_000_017, "followup": 4_000_037, "ood": 5_000_011}
GEN_LENGTH = 48  # a tool call with a long message or event name takes up to ~40 tokens, past tasks.GEN_LENGTH
HISTORY_RATE = 0.35  # share of training examples asked after 1-3 earlier turns
SCRAMBLE_RATE = 0.3  # share of training prompts with a filler word slipped in or their leading verb replaced

# unit: (canonical name the answer uses, spellings people type)
UNITS = {
    "km": ("km", "kilometers", "kilometres"), "m": ("m", "meters", "metres"), "cm": ("cm", "centimeters"),
    "kg": ("kg", "kilograms", "kilos"), "g": ("g", "grams"), "L": ("L", "liters", "litres", "l"),
    "mL": ("mL", "ml", "milliliters"), "hours": ("hours", "hrs", "h"), "minutes": ("minutes", "min", "mins"),
    "seconds": ("seconds", "sec", "secs"), "days": ("days",), "weeks": ("weeks",), "ft": ("ft", "feet"),
    "in": ("inches",),
}
CONVERSIONS = (*tasks.CONVERSIONS, ("weeks", "days", 7))
# pairs without a whole-number factor: asked, they get REFUSAL (the model answers exactly or not at all)
UNSUPPORTED = (("km", "miles"), ("miles", "km"), ("lbs", "kg"), ("kg", "pounds"), ("F", "C"), ("celsius", "fahrenheit"),
               ("inches", "cm"), ("cm", "inches"), ("mph", "km/h"))
HELDOUT_UNSUPPORTED = (("gallons", "liters"), ("ounces", "grams"), ("yards", "meters"), ("stone", "kg"))
# training only: more units it never converts (none of them a held-out one) ...
FOREIGN_UNITS = ("cups", "pints", "quarts", "teaspoons", "tablespoons", "acres", "hectares", "pounds", "nautical miles",
                 "furlongs", "bushels", "carats", "light years", "knots", "barrels", "calories", "joules", "watts",
                 "volts", "pixels", "bytes")
# ... and the dimension of each unit it does know: a pair across two dimensions ("5 kg in meters") has no answer
DIMENSIONS = {"km": "length", "m": "length", "cm": "length", "ft": "length", "in": "length", "kg": "mass",
              "g": "mass", "L": "volume", "mL": "volume", "hours": "time", "minutes": "time", "seconds": "time",
              "days": "time", "weeks": "time"}


# ---------------------------------------------------------------------- typing noise


_CONTRACTIONS = ((r"\bWhat is\b", ("What's", "Whats", "what's", "whats")), (r"\bWhat's\b", ("Whats", "What is")),
                 (r"\bplease\b", ("pls", "plz")), (r"\bPlease\b", ("Pls",)), (r"\byou\b", ("u",)),
                 (r"\bI am\b", ("I'm", "im")))


def _noisy(text: str, rng: random.Random) -> str:
    """A frame as people type it: contractions and abbreviations, a lowercase start, a missing,
    doubled or extra final mark. Applied to the frame before its slots are filled, so a value is
    never changed (a city keeps its capital, a message its words)."""
    for pattern, options in _CONTRACTIONS:
        if rng.random() < 0.4:
            text = re.sub(pattern, rng.choice(options), text)
    if text[:1].isalpha() and rng.random() < 0.5:
        text = text[:1].lower() + text[1:]
    mark = rng.random()
    if text.endswith(("?", ".", "!")):
        if mark < 0.4:
            text = text[:-1]
        elif mark < 0.5:
            text += text[-1]
    elif mark < 0.15 and not text.endswith("}"):
        text += rng.choice(("?", ".", "!"))
    return text


# intents whose slots alone say what is asked, so a frame's leading verb may be replaced by a filler; in the
# others (which list order, which arithmetic operation, which field) the verb is the request
_VERB_FREE = frozenset(f.text for intent in ("weather", "timer", "message", "calendar", "thermostat", "device",
                                             "arith", "units", "ood") for f in FRAMES[intent])


def _scramble(text: str, rng: random.Random, verb_free: bool) -> str:
    """A training frame with one or two FILLERS in place of its leading verb (verb_free frames) or
    slipped in between two fixed words, never next to a slot, so a value's bounds stay clear."""
    words = text.split(" ")
    filler = " ".join(rng.choice(FILLERS) for _ in range(rng.randint(1, 2)))
    slot = [("{" in w) for w in words]
    if verb_free and not slot[0] and rng.random() < 0.5:
        words[0] = filler if words[0][:1].islower() else filler.capitalize()
        return " ".join(words)
    spots = [i for i in range(len(words) + 1) if not (i > 0 and slot[i - 1]) and not (i < len(words) and slot[i])]
    if not spots:
        return text
    i = rng.choice(spots)
    if i == 0 and words[0][:1].isupper():  # the filler now starts the sentence
        words[0], filler = words[0][:1].lower() + words[0][1:], filler.capitalize()
    if i == len(words) and words[-1][-1:] in ".?!":  # before the final mark, not after it
        words[-1], filler = words[-1][:-1], filler + words[-1][-1]
    words.insert(i, filler)
    return " ".join(words)


def _dress(frame: Frame, rng: random.Random, heldout: bool, scramble: bool = False) -> str:
    """Opener + frame + closer, with typing noise: the prompt's template before slot filling.
    `scramble` (training draws only) may put FILLERS into the frame first."""
    text = frame.text
    if scramble and rng.random() < SCRAMBLE_RATE:
        text = _scramble(text, rng, frame.text in _VERB_FREE)
    openers = OPENERS[frame.mood] + (HELDOUT_OPENERS[frame.mood] if heldout else ())
    opener = rng.choice(openers) if rng.random() < 0.35 else ""
    if opener:
        text = opener + text[:1].lower() + text[1:]
    if not text.endswith("}") and rng.random() < 0.2:  # a closer never follows a value it could be read into
        text = text.rstrip(".?!") + rng.choice((" please", " pls", ", thanks", " thx", "?", " now"))
    return _noisy(text, rng)


def _pick(rng: random.Random, intent: str, heldout: bool) -> Frame:
    frames = FRAMES[intent]
    pool = [f for f in frames if f.heldout] if heldout else [f for f in frames if not f.heldout]
    return rng.choice(pool)


# ---------------------------------------------------------------------- slot fillers


def _day(rng: random.Random) -> tuple[str, str]:
    day = rng.choice(tasks.DAYS)
    return day, tasks._on(day)


def _duration(rng: random.Random) -> tuple[str, int]:
    if rng.random() < 0.2:
        hours = rng.randint(1, 3)
        shown = rng.choice(("an hour", "1 hour", "1 hr", "1h")) if hours == 1 else \
            f"{hours}{rng.choice((' hours', ' hrs', 'h'))}"
        return shown, 60 * hours
    minutes = rng.randint(1, 90)
    word = rng.choice(("minute", "min")) if minutes == 1 else rng.choice(("minutes", "min", "mins", "minutes"))
    return f"{minutes}{rng.choice((' ', ' ', ''))}{word}" if word.startswith("min") else f"{minutes} {word}", minutes


def _clock(rng: random.Random) -> tuple[str, str]:
    hour = rng.randint(7, 20)
    spoken, time = tasks._clock(hour)
    number, half = spoken.split()
    forms = (spoken, f"{number}{half}", f"{number} {half.upper()}", time, f"{number}:00 {half}")
    return rng.choice(forms), time


def _items(rng: random.Random, novel: bool, training: bool) -> tuple[list[str], bool]:
    numeric = not novel and rng.random() < 0.55  # a novel-values list is made of words: numbers are not values
    n = rng.randint(3, 6)
    if numeric:
        return [str(x) for x in rng.sample(range(100), n)], True
    words: list[str] = []
    while len(words) < n:
        word = value(rng, "word", novel, training)
        if word not in words:
            words.append(word)
    return words, False


def _join_items(items: list[str], rng: random.Random) -> str:
    style = rng.random()
    if style < 0.55:
        return ", ".join(items)
    if style < 0.75:
        return ",".join(items)
    if style < 0.9:
        return " ".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


# ---------------------------------------------------------------------- intents


def _fill(frame: Frame, rng: random.Random, heldout: bool, novel: bool, **slots) -> str:
    """The dressed frame with its slots filled; training draws (neither held out nor novel) may be scrambled."""
    return _dress(frame, rng, heldout, scramble=not heldout and not novel).format(**slots)


def _weather(rng, heldout, novel):
    city, (day, on) = value(rng, "city", novel, not heldout), _day(rng)
    text = _fill(_pick(rng, "weather", heldout), rng, heldout, novel, city=city, on=on)
    return tasks.Example("tool_call", text, tasks._tool("get_weather", city=city, day=day))


def _timer(rng, heldout, novel):
    shown, minutes = _duration(rng)
    text = _fill(_pick(rng, "timer", heldout), rng, heldout, novel, dur=shown)
    return tasks.Example("tool_call", text, tasks._tool("set_timer", minutes=minutes))


def _message(rng, heldout, novel):
    name, message = value(rng, "name", novel, not heldout), value(rng, "message", novel, not heldout)
    text = _fill(_pick(rng, "message", heldout), rng, heldout, novel, name=name, text=message)
    return tasks.Example("tool_call", text, tasks._tool("send_message", to=name, text=message))


def _calendar(rng, heldout, novel):
    event, day = value(rng, "event", novel, not heldout), rng.choice(tasks.WEEKDAYS)
    shown, time = _clock(rng)
    text = _fill(_pick(rng, "calendar", heldout), rng, heldout, novel, a=article(event), event=event, day=day, time=shown)
    return tasks.Example("tool_call", text, tasks._tool("create_event", title=event, day=day, time=time))


def _home(rng, heldout, novel):
    room = value(rng, "room", novel, not heldout)
    if rng.random() < 0.3:
        degrees = rng.randint(16, 28)
        text = _fill(_pick(rng, "thermostat", heldout), rng, heldout, novel, room=room, deg=degrees)
        return tasks.Example("tool_call", text, tasks._tool("set_thermostat", room=room, temperature=degrees))
    device, state = rng.choice(tasks.DEVICES), rng.choice(("on", "off"))
    text = _fill(_pick(rng, "device", heldout), rng, heldout, novel, room=room, device=device, state=state)
    return tasks.Example("tool_call", text, tasks._tool("set_device", device=device, room=room, state=state))


def tool_call(rng: random.Random, heldout: bool = False, novel: bool = False) -> tasks.Example:
    intents = (_weather, _message, _calendar, _home) if novel else (_weather, _timer, _message, _calendar, _home)
    return rng.choice(intents)(rng, heldout, novel)  # a novel-values draw needs a slot that takes one


_SYMBOLS = {"+": ("+", "plus"), "-": ("-", "minus"), "*": ("*", "x", "times")}


def arithmetic(rng: random.Random, heldout: bool = False, novel: bool = False) -> tasks.Example:
    drawn = tasks.arithmetic(rng)  # the tasks' operands: a product of at most 3 digits, sums of 0..999
    a, op, b = drawn.prompt.rstrip("?.").split()[-3:]
    op = {"plus": "+", "minus": "-", "times": "*"}.get(op, op)
    frame = _pick(rng, f"arith{op}", heldout) if rng.random() < 0.35 else _pick(rng, "arith", heldout)
    symbol = rng.choice(_SYMBOLS[op])
    gap = " " if symbol.isalpha() or rng.random() < 0.5 else ""
    text = _fill(frame, rng, heldout, novel, expr=f"{a}{gap}{symbol}{gap}{b}", a=a, b=b)
    return tasks.Example("arithmetic", text, drawn.answer)


def list_task(rng: random.Random, heldout: bool = False, novel: bool = False) -> tasks.Example:
    items, numeric = _items(rng, novel, not heldout)
    kind = rng.choice(("sort", "sort", "reverse", "desc") if numeric else ("sort", "reverse"))
    key = int if numeric else None
    result = items[::-1] if kind == "reverse" else sorted(items, key=key, reverse=kind == "desc")
    intent = f"list_{kind}_num" if kind == "sort" and numeric else f"list_{kind}"
    text = _fill(_pick(rng, intent, heldout), rng, heldout, novel, items=_join_items(items, rng))
    return tasks.Example("list", text, ", ".join(result))


def units(rng: random.Random, heldout: bool = False, novel: bool = False) -> tasks.Example:
    big, small, factor = rng.choice(CONVERSIONS)
    n = rng.randint(1, 12 if factor < 100 else 50)
    value_, src, dst, out = (n, big, small, n * factor) if rng.random() < 0.5 else (n * factor, small, big, n)
    text = _fill(_pick(rng, "units", heldout), rng, heldout, novel, v=value_, src=rng.choice(UNITS[src]),
                 dst=rng.choice(UNITS[dst]))
    return tasks.Example("units", text, f"{out} {dst}")


def extract(rng: random.Random, heldout: bool = False, novel: bool = False) -> tasks.Example:
    name, city = value(rng, "name", novel, not heldout), value(rng, "city", novel, not heldout)
    day = rng.choice(tasks.WEEKDAYS)
    order, price = rng.randint(1000, 9999), rng.randint(5, 500)
    context = _pick(rng, "context", heldout).text.format(name=name, city=city, day=day, order=order, price=price)
    field = rng.choice(("name", "city") if novel else ("name", "city", "day", "order", "price"))  # novel: copy one
    question = _dress(_pick(rng, f"ask_{field}", heldout), rng, heldout)
    answer = {"name": name, "city": city, "day": day, "order": str(order), "price": str(price)}[field]
    layout = rng.choice(("Context: {c}\nQuestion: {q}", "{c}\n{q}", "{c} {q}", "{c}\n\n{q}"))
    return tasks.Example("extract", layout.format(c=context, q=question), answer)


def _unsupported_pair(rng: random.Random) -> tuple[str, str]:
    """A training pair of units the model must refuse: one of UNSUPPORTED, a unit it does not know (a real one
    or a made-up word) beside one it does, or two it knows of different dimensions."""
    kind = rng.random()
    if kind < 0.3:
        return rng.choice(UNSUPPORTED)
    known = rng.choice(list(DIMENSIONS))
    if kind < 0.8:
        foreign = rng.choice(FOREIGN_UNITS) if kind < 0.6 else made_up(rng, TRAIN_ONSETS).lower() + "s"
        pair = (foreign, rng.choice(UNITS[known]))
        return pair if rng.random() < 0.5 else pair[::-1]
    other = rng.choice([u for u in DIMENSIONS if DIMENSIONS[u] != DIMENSIONS[known]])
    return rng.choice(UNITS[known]), rng.choice(UNITS[other])


def out_of_domain(rng: random.Random, heldout: bool = False, novel: bool = False) -> tasks.Example:
    if rng.random() < 0.25:  # a conversion with no whole-number factor, in the units family's own frames
        src, dst = rng.choice(HELDOUT_UNSUPPORTED) if heldout else _unsupported_pair(rng)
        text = _fill(_pick(rng, "units", False), rng, heldout, novel, v=rng.randint(1, 50), src=src, dst=dst)
    elif not heldout and rng.random() < 0.25:  # training only: a few words that ask for nothing the model does
        text = " ".join(rng.choice(FILLERS) for _ in range(rng.randint(2, 6))).capitalize() + rng.choice(("", "?", "."))
    else:
        text = _fill(_pick(rng, "ood", heldout), rng, heldout, novel, word=value(rng, "word", training=not heldout),
                     city=value(rng, "city", training=not heldout), name=value(rng, "name", training=not heldout))
    return tasks.Example("ood", text, REFUSAL)


GENERATORS = {"tool_call": tool_call, "arithmetic": arithmetic, "list": list_task, "units": units,
              "extract": extract, "ood": out_of_domain}


# ---------------------------------------------------------------------- streams and sets


def _train_example(rng: random.Random, family: str) -> tasks.Example:
    while True:  # a prompt the tasks' held-out split holds is never trained on
        example = GENERATORS[family](rng)
        if tasks.split_of(example.prompt) == "train":
            return example


def iter_train(seed: int = 0, families: Iterable[str] = FAMILIES,
               history_rate: float = HISTORY_RATE) -> Iterator[tasks.Example]:
    """Endless training examples cycling over `families`, training phrasings and values only; a
    share `history_rate` follow 1-3 earlier answered turns of any family."""
    families = _check(families)
    rng = random.Random(f"people:{seed}")
    while True:
        for family in families:
            example = _train_example(rng, family)
            if rng.random() < history_rate:
                turns = [_train_example(rng, rng.choice(FAMILIES)) for _ in range(rng.randint(1, 3))]
                example = replace(example, history=tuple((t.prompt, t.answer) for t in turns))
            yield example


def _check(families: Iterable[str]) -> tuple[str, ...]:
    families = tuple(families)
    unknown = sorted(set(families) - set(GENERATORS))
    if not families or unknown:
        raise ValueError(f"unknown task families {unknown or families}; choose from {', '.join(FAMILIES)}")
    return families


def _draw(name: str, rng: random.Random, family: str) -> tasks.Example:
    if name == "phrasing" or name == "ood":
        return GENERATORS[family](rng, heldout=True)
    return GENERATORS[family](rng, novel=True)  # values


def make_set(name: str, count: int, families: Iterable[str] | None = None, seed: int = 0) -> list[tasks.Example]:
    """`count` examples of held-out set `name` with distinct prompts, even over `families`
    (default: the set's own, SET_FAMILIES)."""
    if name not in SETS:
        raise ValueError(f"unknown held-out set {name!r}; choose one of split, {', '.join(SETS)}")
    families = _check(families or SET_FAMILIES[name])
    outside = [f for f in families if f not in SET_FAMILIES[name]]
    if outside:
        raise ValueError(f"held-out set {name!r} has no {', '.join(outside)} questions; it has "
                         f"{', '.join(SET_FAMILIES[name])}")
    if name == "followup":
        return _followups(count, families, seed)
    rng = random.Random(SET_SEEDS[name] + seed)
    quota = {f: count // len(families) + (i < count % len(families)) for i, f in enumerate(families)}
    seen: set[str] = set()
    out: list[tasks.Example] = []
    for _ in range(100 * count + 1000):
        family = next((f for f in families if quota[f]), None)
        if family is None:
            return out
        example = _draw(name, rng, family)
        if example.prompt not in seen:
            quota[family] -= 1
            seen.add(example.prompt)
            out.append(example)
    raise ValueError(f"could not draw {count} distinct examples of the {name} set")


def _followups(count: int, families: tuple[str, ...], seed: int) -> list[tasks.Example]:
    """Held-out split questions, each after 1-3 earlier held-out turns answered correctly."""
    questions = tasks.make_examples("heldout", count, seed=seed, families=families)
    earlier = tasks.make_examples("heldout", min(3 * count, 300), seed=SET_SEEDS["followup"] + seed)
    rng = random.Random(SET_SEEDS["followup"] + seed)
    out = []
    for question in questions:
        turns = rng.sample(earlier, rng.randint(1, 3))
        out.append(replace(question, history=tuple((t.prompt, t.answer) for t in turns)))
    return out


__all__ = ["REFUSAL", "FAMILIES", "SETS", "GEN_LENGTH", "SET_FAMILIES", "UNITS", "CONVERSIONS", "UNSUPPORTED", "GENERATORS",
           "iter_train", "make_set"]
