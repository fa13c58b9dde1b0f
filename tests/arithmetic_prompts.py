"""Reading an arithmetic question back: the terms, the operator and the right answer."""

import re

OPERATORS = {"+": "+", "plus": "+", "-": "-", "minus": "-", "*": "*", "times": "*"}
APPLY = {"+": int.__add__, "-": int.__sub__, "*": int.__mul__}


def read_question(prompt: str) -> tuple[str, str, str, int]:
    """(a, operator symbol, b, value) of an `unmask.tasks.arithmetic` prompt; a and b as written."""
    a, word, b = re.search(r"(\d+) (\S+) (\d+)", prompt).groups()
    op = OPERATORS[word]
    return a, op, b, APPLY[op](int(a), int(b))
