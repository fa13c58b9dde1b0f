"""Phrase frames of the people-typed tasks (unmask.people), per intent, and the openers put before
them. A frame marked held out (after the `|` in each list) and the HELDOUT_OPENERS are never drawn
in training: the "phrasing" set is made of them. Their words are chosen so that no held-out
frame's fixed text of two or more words occurs in a training frame (tests/test_people.py checks
that over thousands of training draws).
"""

from __future__ import annotations

from typing import NamedTuple


class Frame(NamedTuple):
    text: str  # str.format template over the intent's slots
    mood: str  # "do" (a request: polite openers fit) or "ask" (a question)
    heldout: bool


def _frames(mood: str, train: tuple[str, ...], heldout: tuple[str, ...]) -> tuple[Frame, ...]:
    return tuple(Frame(t, mood, False) for t in train) + tuple(Frame(t, mood, True) for t in heldout)


OPENERS = {"do": ("please ", "pls ", "can you ", "could you ", "hey, ", "hi, ", "ok ", "now "),
           "ask": ("hey, ", "hi, ", "ok so ", "quick question: ", "hey ")}
HELDOUT_OPENERS = {"do": ("i need you to ", "kindly ", "go ahead and "), "ask": ("one question: ", "um, ", "excuse me, ")}

_SORT = ("Sort these: {items}", "Sort {items}", "Put these in order: {items}", "Order these: {items}",
         "Can you sort {items}", "sort this list: {items}", "Sort the following: {items}")
_SORT_HELD = ("Arrange the items {items} in sequence", "Line up these: {items}")
_ARITH_HELD = ("Work out {expr}", "What does {expr} come to?", "Figure out {expr} for me")

FRAMES: dict[str, tuple[Frame, ...]] = {
    "weather": _frames("ask", (
        "What's the weather in {city} {on}?", "Will it rain in {city} {on}?", "Weather forecast for {city} {on}.",
        "How warm is it in {city} {on}?", "weather {city} {on}", "Is it going to be sunny in {city} {on}?",
        "Check the weather in {city} {on}.", "Tell me the weather for {city} {on}.", "{city} weather {on}",
        "Do I need an umbrella in {city} {on}?", "How cold will it be in {city} {on}?",
        "What is the weather like in {city} {on}?", "Forecast {city} {on}"), (
        "Give me the forecast for {city} {on}.", "Should I bring a jacket in {city} {on}?",
        "Any chance of snow in {city} {on}?")),
    "timer": _frames("do", (
        "Set a timer for {dur}.", "Start a timer for {dur}.", "Timer for {dur}", "{dur} timer",
        "Remind me in {dur}.", "Start a {dur} timer.", "Set timer {dur}", "Count down {dur}.",
        "Set a {dur} timer please.", "Timer {dur}", "Wake me in {dur}."), (
        "Ping me after {dur}.", "Let me know once {dur} pass.", "Give me a heads up in {dur}.")),
    "message": _frames("do", (
        "Send a message to {name} saying {text}", "Text {name}: {text}", "Tell {name} that {text}",
        "Message {name} \"{text}\"", "Send {name} a text saying {text}", "Write to {name}: {text}",
        "Send {name} a message: {text}", "Let {name} know that {text}", "Message to {name}: {text}",
        "Text {name} saying {text}"), (
        "Drop {name} a line saying {text}", "Shoot {name} a note that says {text}", "Inform {name}: {text}")),
    "calendar": _frames("do", (
        "Add {a} {event} on {day} at {time}.", "Schedule {a} {event} for {day} at {time}.",
        "Put {event} in my calendar on {day} at {time}.", "Book {a} {event} at {time} on {day}.",
        "Create an event {event} on {day} at {time}", "New event: {event}, {day} {time}",
        "Add {event} to my calendar for {day} at {time}", "Schedule {event} {day} {time}"), (
        "Pencil in {a} {event} for {day} at {time}.", "Block {day} at {time} for {a} {event}.",
        "Reserve {time} on {day} for {a} {event}.")),
    "thermostat": _frames("do", (
        "Set the {room} thermostat to {deg} degrees.", "Make the {room} {deg} degrees.",
        "Heat the {room} to {deg} degrees.", "Set the {room} to {deg} degrees", "{room} thermostat {deg}",
        "Change the {room} temperature to {deg} degrees."), (
        "Warm up the {room} to {deg} degrees.", "I want the {room} at {deg} degrees.")),
    "device": _frames("do", (
        "Turn {state} the {room} {device}.", "Switch the {device} in the {room} {state}.",
        "Please turn the {room} {device} {state}.", "{room} {device} {state}", "Turn the {device} {state} in the {room}",
        "Switch {state} the {room} {device}", "Turn the {room} {device} {state}"), (
        "Flip the {room} {device} {state}.", "Get the {device} in the {room} {state}.")),
    "arith": _frames("ask", (
        "What is {expr}?", "What's {expr}?", "{expr}", "{expr} =", "{expr}=?", "Calculate {expr}.", "Compute {expr}.",
        "How much is {expr}?", "Solve {expr}", "what is {expr}", "{expr}?", "Quick math: {expr}"), _ARITH_HELD),
    "arith+": _frames("do", ("Add {a} and {b}.", "Sum of {a} and {b}", "What's the sum of {a} and {b}?",
                             "Add {b} to {a}."), ("Increase {a} by {b}.",)),
    "arith-": _frames("do", ("Subtract {b} from {a}.", "Take {b} away from {a}.", "What's {a} take away {b}?",
                             "Difference between {a} and {b}"), ("Decrease {a} by {b}.",)),
    "arith*": _frames("do", ("Multiply {a} by {b}.", "{a} multiplied by {b}", "Product of {a} and {b}",
                             "What's {a} multiplied by {b}?"), ("Scale {a} up by a factor of {b}.",)),
    "list_sort": _frames("do", _SORT + ("Alphabetize {items}", "Sort alphabetically: {items}",
                                        "Sort in alphabetical order: {items}"), _SORT_HELD),
    "list_sort_num": _frames("do", _SORT + ("Sort these numbers: {items}", "Sort in ascending order: {items}",
                                            "Arrange {items} from smallest to largest", "Sort from low to high: {items}"),
                             _SORT_HELD + ("Rank {items} lowest first",)),
    "list_desc": _frames("do", ("Sort from largest to smallest: {items}", "Sort in descending order: {items}",
                                "Sort {items} from high to low", "Sort descending: {items}"),
                         ("Rank {items} highest first",)),
    "list_reverse": _frames("do", ("Reverse this list: {items}", "Reverse: {items}", "Reverse the order of {items}",
                                   "Reverse {items}", "Write {items} backwards", "Can you reverse {items}"),
                            ("Turn the sequence {items} around", "Give me {items} last to first")),
    "units": _frames("ask", (
        "Convert {v} {src} to {dst}.", "How many {dst} is {v} {src}?", "{v} {src} in {dst}?", "{v} {src} to {dst}",
        "How many {dst} in {v} {src}?", "What is {v} {src} in {dst}?", "{v}{src} to {dst}", "Convert {v}{src} into {dst}",
        "{v} {src} = ? {dst}"), (
        "Express {v} {src} in {dst}.", "What number of {dst} make up {v} {src}?", "Rewrite {v} {src} as {dst}.")),
    "context": _frames("do", (
        "{name} ordered item {order} for {price} dollars. It ships to {city} on {day}.",
        "Order {order} from {name} costs {price} dollars and arrives in {city} on {day}.",
        "On {day}, {name} paid {price} dollars for order {order}, delivered to {city}.",
        "Hi, this is {name}. Please send order {order} to {city} by {day}. I paid {price} dollars.",
        "Receipt: order {order}, customer {name}, total {price} dollars, delivery {city}, {day}."), (
        "{name} bought order {order} ({price} dollars); courier to {city}, expected {day}.",
        "Shipping note for {name}: parcel {order}, value {price} dollars, destination {city}, arriving {day}.")),
    "ask_name": _frames("ask", ("Who placed the order?", "Who ordered?", "Who is the customer?", "Whose order?"),
                        ("Which person bought it?",)),
    "ask_city": _frames("ask", ("Which city is it going to?", "Where does it ship?", "Which city?", "Where is it going?"),
                        ("What is the destination?",)),
    "ask_day": _frames("ask", ("On which day?", "What day?", "When does it arrive?", "Which day?"),
                       ("Arrival weekday?",)),
    "ask_order": _frames("ask", ("What is the order number?", "Order number?", "Which order?", "What's the order id?"),
                         ("Give the parcel id.",)),
    "ask_price": _frames("ask", ("How many dollars?", "How much was paid?", "What did it cost?", "Price?"),
                         ("What was the total value?",)),
    "ood": _frames("ask", (
        "Hello", "Hi there", "Hello, who are you?", "Who are you?", "What can you do?", "How are you?",
        "Good morning", "Thanks!", "What's your name?", "Tell me a joke", "Write a poem about {word}.",
        "What is the capital of France?", "Who wrote Hamlet?", "Translate {word} into Spanish",
        "Explain quantum physics", "What's the meaning of life?", "Help me with my homework",
        "Recommend a movie", "Is {name} a nice name?", "Tell me about {city}.", "What should I cook tonight?",
        "Are you a robot?", "Can you help me?", "hey", "Write an email to my boss", "What's the news?",
        "Play some music", "Who won the game last night?", "Define {word}", "Do you like {word}?",
        "Book me a flight to {city}", "Call {name}", "What time is it?", "What's the date today?", "Tell me a story",
        "Write a haiku about {word}", "Draw a cat", "Can you dance?", "Who is the president?",
        "How tall is Mount Everest?", "What is love?", "Find a restaurant near me", "Tell me a fun fact",
        "What's your favourite colour?", "Do you dream?", "Are you alive?", "I'm bored", "I love you", "Good night",
        "See you later", "Bye", "What year is it?", "How do I fix my bike?", "Why is the sky blue?", "What is AI?",
        "Explain how rainbows form", "Give me some advice", "Who invented the telephone?",
        "How many planets are there?", "Can you speak French?", "Teach me chess", "Buy me some shoes",
        "Find my phone", "Is it safe to eat {word}?", "Is {name} a real name?",
        "Recommend a book about {word}", "Plan a trip to {city}", "What's the population of {city}?",
        "How far is {city} from here?", "Who is {name}?", "Write a song about {city}", "Open the door",
        "What's on TV tonight?", "How do I make pancakes?", "Tell me something interesting",
        "Good afternoon", "Nice to meet you", "You are great", "Where do you live?", "Can you see me?",
        "What's the best phone?", "How do I lose weight?", "Spell {word} in French", "Is {city} a big city?",
        "What language do they speak in {city}?", "Give me a compliment", "Make me laugh"), (
        "Good evening, what are you?", "Sing me a song", "Who painted the Mona Lisa?", "How old is the universe?",
        "Summarize this article for me", "Describe {city} in three words.", "What rhymes with {word}?",
        "Order me a pizza", "Yo what's up", "Is {word} a fruit or a colour?")),
}


def _words(texts) -> set[str]:
    return {w.strip(".,?!:;\"'()").lower() for text in texts for w in text.split()}


_HELDOUT_WORDS = _words([f.text for frames in FRAMES.values() for f in frames if f.heldout]
                        + [o for openers in HELDOUT_OPENERS.values() for o in openers])

# Words put into training frames at random (people.SCRAMBLE_RATE): a verb replaced or a word slipped in, so
# the model learns that the slots and a few key words decide the intent, not a frame's exact wording. No word
# of a held-out frame or opener is among them, so the phrasing set stays unseen; nor a day or time word, which
# would read as a slot.
_FILLER_TEXT = """
do make get go see look find check need want try let keep start run help handle tell show put
really just maybe quickly actually basically honestly probably definitely also still again right
alright okay hmm well so anyway yeah sure cool great awesome fine thanks
thing stuff something quick little real
friend buddy mate boss dude guys folks assistant computer bot phone app
umm erm oh ah wow lol btw asap sorry oops hello yes
whatever somehow kinda sorta totally simply exactly literally seriously hopefully
"""
FILLERS = tuple(sorted(_words(_FILLER_TEXT.split()) - _HELDOUT_WORDS))

__all__ = ["Frame", "FRAMES", "OPENERS", "HELDOUT_OPENERS", "FILLERS"]
