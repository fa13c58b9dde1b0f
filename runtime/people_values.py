"""Slot values of the people-typed tasks (unmask.people): large training lists, lists of novel
values never drawn in training, and made-up values of both kinds.

A training draw takes a value from TRAIN[kind] or a made-up one whose first letter is in
TRAIN_ONSETS; a novel draw takes one from NOVEL[kind] or a made-up one whose first letter is in
NOVEL_ONSETS. The two onset sets are disjoint and every draw rejects a value the other side's
list holds, so no novel value can be a training value: the held-out "values" set measures
copying, not recall.
"""

from __future__ import annotations

import random

from . import tasks

_CITIES = tasks.CITIES + (
    "Amsterdam", "Athens", "Bangkok", "Barcelona", "Brussels", "Budapest", "Chicago", "Copenhagen", "Dallas",
    "Delhi", "Dubai", "Edinburgh", "Florence", "Geneva", "Hamburg", "Helsinki", "Houston", "Istanbul", "Jakarta",
    "Kyoto", "Lagos", "Lyon", "Manila", "Miami", "Milan", "Montreal", "Mumbai", "Nairobi", "Naples", "Osaka",
    "Porto", "Quebec", "Riga", "Santiago", "Seattle", "Stockholm", "Taipei", "Tallinn", "Valencia", "Warsaw",
    "New York", "San Diego", "Los Angeles", "Hong Kong", "Cape Town", "Buenos Aires",
)
_NOVEL_CITIES = ("Adelaide", "Bergen", "Cordoba", "Dakar", "Gdansk", "Hanoi", "Krakow", "Leeds", "Malaga",
                 "Nantes", "Perth", "Quito", "Seville", "Tbilisi", "Utrecht", "Vilnius", "Windhoek", "Yerevan",
                 "Salt Lake City", "Rio de Janeiro", "Kuala Lumpur", "Ghent", "Bologna", "Graz")
_NAMES = tasks.NAMES + (
    "Alice", "Bob", "Chloe", "Daniel", "Eva", "Finn", "Gina", "Henry", "Isla", "James", "Kate", "Liam", "Mia",
    "Noah", "Olivia", "Peter", "Quinn", "Ruby", "Sofia", "Tom", "Uma", "Vera", "Will", "Yara", "Zoe", "Mom", "Dad",
    "Lucas", "Nora", "Oscar", "Lily", "Max", "Ella", "Adam", "Sara", "Mark", "Julia", "Chris", "Laura", "Ahmed",
)
_NOVEL_NAMES = ("Aurelio", "Beatrix", "Cosmo", "Delphine", "Ezra", "Fiona", "Gideon", "Harriet", "Ignatius",
                "Juno", "Kasimir", "Ludmila", "Magnus", "Niamh", "Ottilie", "Priya", "Rufus", "Saoirse", "Thaddeus",
                "Ulrich", "Wendell", "Ximena", "Yusuf", "Grandma", "Aunt Jo")
_ROOMS = tasks.ROOMS + ("dining room", "kids room", "study", "laundry room", "porch", "guest room", "basement",
                        "hall", "den", "attic")
_NOVEL_ROOMS = ("pantry", "nursery", "sunroom", "cellar", "loft", "workshop", "playroom", "library")
_EVENTS = tasks.EVENTS + ("standup", "doctor", "team sync", "coffee", "yoga", "party", "exam", "class",
                          "haircut", "date night", "board meeting", "one on one", "workout", "appointment")
_NOVEL_EVENTS = ("pottery class", "vet visit", "book club", "retro", "piano lesson", "tax review", "dentist check",
                 "brunch", "sprint demo", "parent evening")
_MESSAGES = tasks.MESSAGES + (
    "the door is open", "I love you", "bring the charger", "I forgot my keys", "we need bread",
    "the train is delayed", "let's meet at six", "call mom tonight", "I got the job", "lunch at noon?",
    "see you at the gym", "the package arrived", "don't forget the tickets", "I'm at the station",
    "running late again", "the kids are asleep", "back in an hour", "can we talk later", "good night",
    "park near the entrance",
)
_NOVEL_MESSAGES = ("cat broke the vase", "grab some oat milk", "landing at nine",
                   "wear the blue scarf", "the plumber is here", "meet me by the fountain", "I fixed the bike",
                   "save me a seat", "new wifi password", "happy anniversary")
_WORDS = tasks.WORDS + (
    "banana", "orange", "apricot", "fig", "lime", "berry", "olive", "onion", "carrot", "potato", "tomato",
    "yellow", "purple", "pink", "gray", "brown", "lion", "tiger", "wolf", "horse", "mouse", "duck", "frog",
    "shark", "whale", "eagle", "chair", "table", "lamp", "door", "book", "pen", "cup", "spoon", "river", "hill",
)
_NOVEL_WORDS = ("quince", "papaya", "turnip", "leek", "ivory", "teal", "crimson", "badger", "otter", "lynx",
                "heron", "gecko", "sofa", "vase", "kettle", "ladder", "canyon", "meadow", "walnut", "radish")

TRAIN = {"city": _CITIES, "name": _NAMES, "room": _ROOMS, "event": _EVENTS, "message": _MESSAGES, "word": _WORDS}
NOVEL = {"city": _NOVEL_CITIES, "name": _NOVEL_NAMES, "room": _NOVEL_ROOMS, "event": _NOVEL_EVENTS,
         "message": _NOVEL_MESSAGES, "word": _NOVEL_WORDS}
# kinds that also get made-up values (a made-up message or event would not read as one)
MADE_UP_KINDS = ("city", "name", "word")
MADE_UP_RATE = 0.3  # share of novel draws of those kinds that are made up (the "values" set)
TRAIN_MADE_UP_RATE = 0.45  # share of training draws that are made up, half of them by made_up_rich: the
# model must copy what it reads, and the novel set's real names ("Kasimir", "Harriet") are spelt with letters
# and endings the plain syllables never have

TRAIN_ONSETS = "BDFGHKLMNPRST"
NOVEL_ONSETS = "VZJQ"
_CONSONANTS = "bdfgklmnprstvz"
_VOWELS = "aeiou"


def made_up(rng: random.Random, onsets: str) -> str:
    """A pronounceable word no list holds, e.g. "Tavobe": 2-3 syllables, first letter from `onsets`."""
    syllables = [rng.choice(onsets) + rng.choice(_VOWELS)]
    syllables += [rng.choice(_CONSONANTS) + rng.choice(_VOWELS) for _ in range(rng.randint(1, 2))]
    if rng.random() < 0.4:
        syllables.append(rng.choice("nrls"))
    return "".join(syllables)


_RICH_ONSETS = ("b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "z", "br", "ch",
                "cl", "dr", "fr", "gr", "kr", "pl", "pr", "sh", "st", "th", "tr")
_RICH_VOWELS = ("a", "e", "i", "o", "u", "y", "ai", "ea", "ee", "ia", "ie", "io", "oa", "ou")
_RICH_ENDINGS = ("", "", "", "n", "r", "l", "s", "x", "t", "th", "ck", "nd", "rt", "ss", "tte", "ne", "rd", "sh")


def made_up_rich(rng: random.Random, onsets: str) -> str:
    """A made-up word with the clusters and endings real names have ("Nechard", "Siodriatte"):
    1-2 syllables after a first letter from `onsets`. Training draws only."""
    word = rng.choice(onsets) + rng.choice(_RICH_VOWELS)
    for _ in range(rng.randint(0, 1)):
        word += rng.choice(_RICH_ONSETS) + rng.choice(_RICH_VOWELS)
    word += rng.choice(_RICH_ENDINGS)
    return word if len(word) >= 3 else word + rng.choice("nrls")


def _taken(value: str, lists: dict[str, tuple[str, ...]]) -> bool:
    low = value.lower()
    return any(low == item.lower() for pool in lists.values() for item in pool)


def value(rng: random.Random, kind: str, novel: bool = False, training: bool = False) -> str:
    """One slot value of `kind` (city, name, room, event, message, word) from the training side,
    or (novel) from the side never drawn in training. `training` marks a draw for a training
    prompt (not a held-out set's): made-up values come more often and richer (TRAIN_MADE_UP_RATE)."""
    pool, onsets, other = (NOVEL[kind], NOVEL_ONSETS, TRAIN) if novel else (TRAIN[kind], TRAIN_ONSETS, NOVEL)
    training = training and not novel
    if kind in MADE_UP_KINDS and rng.random() < (TRAIN_MADE_UP_RATE if training else MADE_UP_RATE):
        while True:
            word = made_up_rich(rng, onsets) if training and rng.random() < 0.5 else made_up(rng, onsets)
            word = word if kind != "word" else word.lower()
            if not _taken(word, other):
                return word
    return rng.choice(pool)


def article(noun: str) -> str:
    return "an" if noun[0].lower() in "aeiou" else "a"


__all__ = ["TRAIN", "NOVEL", "TRAIN_ONSETS", "NOVEL_ONSETS", "made_up", "made_up_rich", "value", "article"]
