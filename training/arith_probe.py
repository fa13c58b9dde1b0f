"""Where a package's arithmetic goes wrong: exact match by operation and operand digit counts.

    python training/arith_probe.py [PKG] [--per-shape 40] [--threads 2] [settings as in unmask eval]

The held-out arithmetic family draws its terms uniformly from 0..999, so nine in ten
are 3-digit and one overall score hides which shapes fail. This asks `--per-shape`
questions of each shape (a + b and a - b with 1-, 2- and 3-digit terms, a >= b for
differences; a 1-2 digit number times a digit), in the task's own phrasings and only
prompts of the held-out split, and prints per shape: exact match, exact match apart for
answers shorter than the longer term, as long, and longer (a difference that loses
digits, a sum that carries out), how often the answer has the right number of digits,
and, among those, how often each place (ones, tens, hundreds, thousands) is right. PKG defaults to the embedded model; decoding defaults to
the package's, gen_length from its tasks.json in one block (as `unmask eval`).
"""

from __future__ import annotations

import argparse
import random
import sys

import unmask
from unmask import tasks
from unmask.evaluate import read_task_spec, task_defaults

TEMPLATES = ("What is {a} {op} {b}?", "Compute {a} {op} {b}.", "What is {a} {word} {b}?", "Calculate {a} {op} {b}.")
WORDS = {"+": "plus", "-": "minus", "*": "times"}
SHAPES = tuple((op, da, db) for op in "+-" for da in (1, 2, 3) for db in (1, 2, 3) if db <= da) + (("*", 2, 1),)
PLACES = ("ones", "tens", "hundreds", "thousands")


def number(rng: random.Random, digits: int) -> int:
    return rng.randint(0 if digits == 1 else 10 ** (digits - 1), 10 ** digits - 1)


def questions(shape: tuple[str, int, int], count: int, rng: random.Random) -> list[tuple[str, str]]:
    """`count` distinct held-out (prompt, answer) pairs of one shape."""
    op, da, db = shape
    found: dict[str, str] = {}
    for _ in range(200 * count):
        a, b = number(rng, da), (rng.randint(2, 9) if op == "*" else number(rng, db))
        value = a + b if op == "+" else a - b if op == "-" else a * b
        if op == "-" and value < 0:
            continue
        if op != "-" and rng.random() < 0.5:
            a, b = b, a  # the task writes sums and products either way round
        prompt = rng.choice(TEMPLATES).format(a=a, b=b, op=op, word=WORDS[op])
        if tasks.split_of(prompt) == "heldout":
            found[prompt] = str(value)
            if len(found) == count:
                break
    return list(found.items())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("package", nargs="?", default=None, help="package folder [embedded model]")
    parser.add_argument("--per-shape", type=int, default=40, help="questions per shape")
    parser.add_argument("--threads", type=int, default=None, help="ONNX Runtime threads [device profile's]")
    parser.add_argument("--threshold", type=float, default=None, help="commit every position this confident")
    parser.add_argument("--cache", default=None, help="none | prefix | dual [package default]")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.per_shape < 1:
        parser.error("--per-shape must be at least 1")

    model = unmask.load(args.package, device="cpu", threads=args.threads)
    overrides = {k: v for k, v in (("threshold", args.threshold), ("cache", args.cache)) if v is not None}
    cfg = model.resolve_config(**task_defaults(read_task_spec(model.package.folder)), **overrides)
    rng = random.Random(args.seed)
    print(f"{model.package.folder} ({model.manifest.precision}), {args.per_shape} held-out questions per shape, "
          f"algorithm {cfg.algorithm}, threshold {cfg.threshold}, cache {cfg.cache}")
    print()
    print("| shape | exact | answer shorter | as long | longer | length right | " + " | ".join(PLACES) + " |")
    print("|---|---|---|---|---|---|" + "---|" * len(PLACES))
    for shape in SHAPES:
        pairs = questions(shape, args.per_shape, rng)
        op, da, db = shape
        exact = length = 0
        right, seen = [0] * len(PLACES), [0] * len(PLACES)
        by_length = {-1: [0, 0], 0: [0, 0], 1: [0, 0]}  # answer digits vs the longer term's: [exact, asked]
        for prompt, answer in pairs:
            got = model.generate(messages=[{"role": "user", "content": prompt}], config=cfg).text.strip()
            exact += got == answer
            group = by_length[(len(answer) > max(da, db)) - (len(answer) < max(da, db))]
            group[0] += got == answer
            group[1] += 1
            if len(got) == len(answer):
                length += 1
                for place, (g, w) in enumerate(zip(reversed(got), reversed(answer))):
                    right[place] += g == w
                    seen[place] += 1
        cells = [f"{r / s:.0%} ({s})" if s else "-" for r, s in zip(right, seen)]
        groups = [f"{r / s:.0%} ({s})" if s else "-" for r, s in by_length.values()]
        print(f"| {da}-digit {op} {db}-digit | {exact / len(pairs):.0%} | " + " | ".join(groups)
              + f" | {length / len(pairs):.0%} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
