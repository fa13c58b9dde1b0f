"""Deterministic instruction tasks for the embedded model: generation, chat format, scoring.

Five families where a small diffusion LM can be exactly right and parallel decoding
shows: tool calls as JSON, arithmetic, sorting/reversing lists, unit conversion and
extracting a value from a given context. Every example is a function of (split,
seed, index), and a prompt belongs to exactly one split (a hash of its text decides),
so the held-out set never overlaps training. Pure Python: `unmask eval` uses it at
run time without torch.

    examples = make_examples("heldout", 100)          # balanced over FAMILIES
    prompt = chat_prompt(examples[0].prompt)           # LLaDA chat format, ready to tokenize
    exact_match(model_text, examples[0].answer)
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Sequence

FAMILIES = ("tool_call", "arithmetic", "list", "units", "extract")
SPLITS = ("train", "heldout")
GEN_LENGTH = 32  # every answer (+ <|eot_id|>) fits; the rest of the region is EOS padding
HELDOUT_SEED = 1_000_003  # distinct seeds per split; the prompt hash keeps the splits disjoint

BOS, EOS, MASK = "<|startoftext|>", "<|endoftext|>", "<|mdm_mask|>"
START_HEADER, END_HEADER, EOT = "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"
SPECIAL_TOKENS = (BOS, EOS, MASK, START_HEADER, END_HEADER, EOT)

# LLaDA-Instruct's template (Llama-3 headers, BOS before the first message).
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    " + message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)


@dataclass(frozen=True)
class Example:
    family: str
    prompt: str  # the user's message
    answer: str  # the one exact answer
    history: tuple[tuple[str, str], ...] = ()  # earlier (user, assistant) turns the prompt follows


def chat_prompt(user_text: str, history: Sequence[tuple[str, str]] = ()) -> str:
    """Earlier (user, assistant) turns, the user turn and the assistant header: what CHAT_TEMPLATE
    renders with add_generation_prompt, as `unmask chat` sends it on a later turn."""
    turns = "".join(f"{START_HEADER}{role}{END_HEADER}\n\n{text.strip()}{EOT}"
                    for user, reply in history for role, text in (("user", user), ("assistant", reply)))
    return (f"{BOS}{turns}{START_HEADER}user{END_HEADER}\n\n{user_text.strip()}{EOT}"
            f"{START_HEADER}assistant{END_HEADER}\n\n")


def normalize(text: str) -> str:
    """What exact match compares: the text up to the first end token, outer whitespace removed."""
    for stop in (EOT, EOS):
        text = text.split(stop, 1)[0]
    return text.strip()


def exact_match(prediction: str, answer: str) -> bool:
    return normalize(prediction) == normalize(answer)


def score(examples: Sequence[Example], predictions: Sequence[str]) -> dict[str, float]:
    """Exact-match accuracy per family and "overall", as fractions in [0, 1]."""
    if len(examples) != len(predictions):
        raise ValueError(f"{len(examples)} examples but {len(predictions)} predictions")
    hits: dict[str, list[bool]] = {}
    for ex, pred in zip(examples, predictions):
        hits.setdefault(ex.family, []).append(exact_match(pred, ex.answer))
    result = {family: sum(h) / len(h) for family, h in sorted(hits.items())}
    result["overall"] = sum(sum(h) for h in hits.values()) / max(1, len(examples))
    return result


# ---------------------------------------------------------------------- slot values

CITIES = ("Paris", "London", "Berlin", "Tokyo", "Madrid", "Rome", "Oslo", "Vienna", "Seoul", "Lima",
          "Cairo", "Dublin", "Prague", "Lisbon", "Boston", "Denver", "Sydney", "Toronto", "Munich", "Zurich")
DAYS = ("today", "tomorrow", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
WEEKDAYS = DAYS[2:]
NAMES = ("Anna", "Ben", "Carla", "David", "Emma", "Felix", "Grace", "Hugo", "Ines", "Jack", "Kim", "Leo",
         "Maya", "Nina", "Omar", "Paul", "Rosa", "Sam", "Tara", "Victor")
MESSAGES = ("I will be late", "see you soon", "call me back", "on my way", "happy birthday",
            "dinner is ready", "running ten minutes late", "thanks for today", "meeting moved to noon",
            "good luck tomorrow", "can you pick up milk", "I am home")
EVENTS = ("meeting", "lunch", "call", "dentist", "gym", "review", "interview", "dinner")
ROOMS = ("kitchen", "living room", "bedroom", "bathroom", "office", "garage", "hallway")
DEVICES = ("lights", "fan", "heater", "tv", "speaker")
WORDS = ("apple", "pear", "plum", "kiwi", "lemon", "mango", "grape", "peach", "cherry", "melon",
         "red", "blue", "green", "black", "white", "cat", "dog", "fox", "owl", "bear")
# (from, to, factor): value_to = value_from * factor; each is also asked in reverse.
CONVERSIONS = (("km", "m", 1000), ("m", "cm", 100), ("kg", "g", 1000), ("L", "mL", 1000),
               ("hours", "minutes", 60), ("minutes", "seconds", 60), ("days", "hours", 24), ("ft", "in", 12))


def _tool(name: str, **arguments) -> str:
    return json.dumps({"name": name, "arguments": arguments}, separators=(",", ":"))  # compact: fewer tokens


def _clock(hour24: int) -> tuple[str, str]:
    """A spoken time ("3 pm") and its 24-hour form ("15:00")."""
    spoken = f"{hour24 % 12 or 12} {'am' if hour24 < 12 else 'pm'}"
    return spoken, f"{hour24:02d}:00"


def _on(day: str) -> str:
    return day if day in ("today", "tomorrow") else f"on {day}"


# ---------------------------------------------------------------------- families


def tool_call(rng: random.Random) -> Example:
    kind = rng.choice(("weather", "timer", "message", "calendar", "home"))
    if kind == "weather":
        city, day = rng.choice(CITIES), rng.choice(DAYS)
        prompt = rng.choice((f"What's the weather in {city} {_on(day)}?", f"Will it rain in {city} {_on(day)}?",
                             f"Weather forecast for {city} {_on(day)}, please.", f"How warm is it in {city} {_on(day)}?"))
        return Example("tool_call", prompt, _tool("get_weather", city=city, day=day))
    if kind == "timer":
        minutes = rng.randint(1, 90)
        unit = "minute" if minutes == 1 else "minutes"
        prompt = rng.choice((f"Set a timer for {minutes} {unit}.", f"Start a {minutes} minute timer.",
                             f"Remind me in {minutes} {unit}.", f"Timer, {minutes} {unit} please."))
        return Example("tool_call", prompt, _tool("set_timer", minutes=minutes))
    if kind == "message":
        name, text = rng.choice(NAMES), rng.choice(MESSAGES)
        prompt = rng.choice((f"Send a message to {name} saying {text}.", f"Text {name}: {text}.",
                             f"Tell {name} that {text}.", f"Message {name} \"{text}\"."))
        return Example("tool_call", prompt, _tool("send_message", to=name, text=text))
    if kind == "calendar":
        event, day = rng.choice(EVENTS), rng.choice(WEEKDAYS)
        a = "an" if event[0] in "aeiou" else "a"
        spoken, time = _clock(rng.randint(7, 20))
        prompt = rng.choice((f"Add {a} {event} on {day} at {spoken}.", f"Schedule {a} {event} for {day} at {spoken}.",
                             f"Put {event} in my calendar on {day} at {spoken}.",
                             f"Book {a} {event} at {spoken} on {day}."))
        return Example("tool_call", prompt, _tool("create_event", title=event, day=day, time=time))
    room = rng.choice(ROOMS)
    if rng.random() < 0.3:
        degrees = rng.randint(16, 28)
        prompt = rng.choice((f"Set the {room} thermostat to {degrees} degrees.",
                             f"Make the {room} {degrees} degrees.", f"Heat the {room} to {degrees} degrees."))
        return Example("tool_call", prompt, _tool("set_thermostat", room=room, temperature=degrees))
    device, state = rng.choice(DEVICES), rng.choice(("on", "off"))
    prompt = rng.choice((f"Turn {state} the {room} {device}.", f"Switch the {device} in the {room} {state}.",
                         f"Please turn the {room} {device} {state}."))
    return Example("tool_call", prompt, _tool("set_device", device=device, room=room, state=state))


def _uniform_operand(rng: random.Random) -> int:
    return rng.randint(0, 999)


def arithmetic(rng: random.Random, operand: Callable[[random.Random], int] = _uniform_operand,
               ops: str = "+-*") -> Example:
    """A sum, difference or product; `operand` draws the terms of sums and differences
    (default: uniform over 0..999, which the held-out split is made of), `ops` the
    operations drawn from (default all three, which the held-out split is made of)."""
    if not ops or set(ops) - set("+-*"):
        raise ValueError(f"ops must be drawn from '+', '-' and '*', got {ops!r}")
    op = rng.choice(ops)
    if op == "*":  # product of at most 3 digits: a 1-2 digit number times a digit
        a, b = rng.randint(2, 99), rng.randint(2, 9)
        a, b = (a, b) if rng.random() < 0.5 else (b, a)
        value = a * b
    else:
        a, b = operand(rng), operand(rng)
        if op == "-" and b > a:
            a, b = b, a
        value = a + b if op == "+" else a - b
    word = {"+": "plus", "-": "minus", "*": "times"}[op]
    prompt = rng.choice((f"What is {a} {op} {b}?", f"Compute {a} {op} {b}.", f"What is {a} {word} {b}?",
                         f"Calculate {a} {op} {b}."))
    return Example("arithmetic", prompt, str(value))


def list_task(rng: random.Random) -> Example:
    numeric = rng.random() < 0.6
    n = rng.randint(3, 6)
    items = [str(x) for x in rng.sample(range(100), n)] if numeric else rng.sample(WORDS, n)
    shown = ", ".join(items)
    if rng.random() < 0.5:
        result = sorted(items, key=int) if numeric else sorted(items)
        order = "ascending order" if numeric else "alphabetical order"
        prompt = rng.choice((f"Sort in {order}: {shown}", f"Sort these: {shown}"))
    else:
        result = items[::-1]
        prompt = rng.choice((f"Reverse this list: {shown}", f"Reverse: {shown}"))
    return Example("list", prompt, ", ".join(result))


def units(rng: random.Random) -> Example:
    big, small, factor = rng.choice(CONVERSIONS)
    n = rng.randint(1, 12 if factor < 100 else 50)
    if rng.random() < 0.5:
        value, src, dst, out = n, big, small, n * factor
    else:
        value, src, dst, out = n * factor, small, big, n
    prompt = rng.choice((f"Convert {value} {src} to {dst}.", f"How many {dst} is {value} {src}?",
                         f"{value} {src} in {dst}?"))
    return Example("units", prompt, f"{out} {dst}")


def extract(rng: random.Random) -> Example:
    name, city, day = rng.choice(NAMES), rng.choice(CITIES), rng.choice(WEEKDAYS)
    order, price = rng.randint(1000, 9999), rng.randint(5, 500)
    context = rng.choice((
        f"{name} ordered item {order} for {price} dollars. It ships to {city} on {day}.",
        f"Order {order} from {name} costs {price} dollars and arrives in {city} on {day}.",
        f"On {day}, {name} paid {price} dollars for order {order}, delivered to {city}.",
    ))
    field, question = rng.choice((
        (name, "Who placed the order?"), (city, "Which city is it going to?"), (day, "On which day?"),
        (str(order), "What is the order number?"), (str(price), "How many dollars?"),
    ))
    return Example("extract", f"Context: {context}\nQuestion: {question}", field)


GENERATORS: dict[str, Callable[[random.Random], Example]] = {
    "tool_call": tool_call, "arithmetic": arithmetic, "list": list_task, "units": units, "extract": extract,
}


# ---------------------------------------------------------------------- loose phrasing


def loosen(prompt: str, rng: random.Random | None = None) -> str:
    """The prompt as people type it in a chat: without its final punctuation and with a
    lowercase first letter. With `rng`, a random one of the two or both (training draws
    these); without, both (what `unmask eval --loose` asks). Template prompts start with a
    capital or a digit, and only the list family's lack a final mark, so a loosened prompt is
    either the prompt itself or no template's output: loosening a training prompt never yields
    a held-out one."""
    drop, lower = (True, True) if rng is None else rng.choice(((True, False), (False, True), (True, True)))
    text = prompt.rstrip(".?!") if drop else prompt
    return text[:1].lower() + text[1:] if lower else text


# ---------------------------------------------------------------------- splits


def split_of(prompt: str) -> str:
    """The split a prompt belongs to: one in ten prompts (by hash) is held out."""
    digest = hashlib.sha256(prompt.encode("utf-8")).digest()
    return "heldout" if digest[0] % 10 == 0 else "train"


def iter_examples(split: str, seed: int = 0, families: Iterable[str] = FAMILIES) -> Iterator[Example]:
    """An endless, deterministic stream of examples of one split, cycling over the families."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")
    families = tuple(families)
    unknown = sorted(set(families) - set(GENERATORS))
    if unknown:
        raise ValueError(f"unknown task families {unknown}; choose from {', '.join(FAMILIES)}")
    rng = random.Random(seed + (HELDOUT_SEED if split == "heldout" else 0))
    while True:
        for family in families:
            while True:
                example = GENERATORS[family](rng)
                if split_of(example.prompt) == split:
                    break
            yield example


def make_examples(split: str, count: int, seed: int = 0, families: Iterable[str] = FAMILIES) -> list[Example]:
    """`count` examples of a split with distinct prompts, as even over the families as count allows."""
    families = tuple(families)
    quota = {f: count // len(families) + (i < count % len(families)) for i, f in enumerate(families)}
    seen: set[str] = set()
    out: list[Example] = []
    stream = iter_examples(split, seed, families)
    for _ in range(100 * count + 1000):
        if len(out) == count:
            return out
        example = next(stream)
        if quota[example.family] and example.prompt not in seen:
            quota[example.family] -= 1
            seen.add(example.prompt)
            out.append(example)
    raise ValueError(f"could not draw {count} distinct {split} examples; short families: "
                     f"{sorted(f for f, n in quota.items() if n)}")


__all__ = [
    "FAMILIES", "SPLITS", "GEN_LENGTH", "SPECIAL_TOKENS", "CHAT_TEMPLATE",
    "BOS", "EOS", "MASK", "START_HEADER", "END_HEADER", "EOT",
    "Example", "chat_prompt", "normalize", "exact_match", "score", "loosen",
    "iter_examples", "make_examples", "split_of",
]
