"""JSON answers that are guaranteed to parse: a schema becomes a fixed-token template.

A diffusion model fills holes in a canvas, so what a schema fixes (braces, keys, quotes,
commas) is pinned as template tokens and the model writes only the values, each into a
hole of fixed width whose positions may hold only tokens that fit the value's type (the
logits of every other token are -inf there). The end-of-text token is allowed as filler
inside a hole and drops out of the value. The answer is rendered from the canvas
segment by segment (a string through json.dumps), so it parses and validates by
construction, whatever the model writes.

Supported schema subset (anything else is refused with the keyword named):
- `object` with `properties` (every property is written, in order; `required` must name
  only listed properties; `additionalProperties` is accepted and never needed), nested;
- `string` (`maxLength` caps both the hole, in tokens, and the value, in characters;
  `minLength` makes the first positions non-empty), `integer` and `number` (non-negative
  digits; `minimum`/`maximum` clamp), `boolean`, and `enum` of values that are each
  one token of the model's vocabulary.
`json_object` without a schema is handled in `answer` (see `JsonObjectAnswer`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from ..errors import ConfigError

STRING_WIDTH = 16  # tokens of a string hole without maxLength
NUMBER_WIDTH = 6  # tokens of an integer/number hole without maximum
MAX_WIDTH = 64  # no single hole is wider than this
_KEYWORDS = {"type", "properties", "required", "additionalProperties", "title", "description", "maxLength",
             "minLength", "minimum", "maximum", "enum", "$schema", "default", "examples"}
_BAD_IN_STRING = set('"\\') | {chr(c) for c in range(32)}


class Vocabulary:
    """Every token's text, computed once per model, and the token sets holes draw from."""

    def __init__(self, decode: Callable[[Sequence[int]], str], vocab_size: int, special_ids: set[int], filler: int):
        self.size, self.filler = vocab_size, filler
        self.pieces = ["" if i in special_ids else decode([i]) for i in range(vocab_size)]
        self.string = self._where(lambda p: bool(p) and not (set(p) & _BAD_IN_STRING) and "\ufffd" not in p)
        self.digits = self._where(lambda p: p.isascii() and p.isdigit())

    def _where(self, keep: Callable[[str], bool]) -> np.ndarray:
        return np.array([keep(p) for p in self.pieces], dtype=bool)

    def literal_tokens(self, literals: Sequence[str], path: str) -> np.ndarray:
        """One token per literal (its JSON text), or ConfigError naming the literal that has none."""
        allowed = np.zeros(self.size, dtype=bool)
        for literal in literals:
            hits = [i for i, p in enumerate(self.pieces) if p == literal]
            if not hits:
                raise ConfigError(f"response_format schema at {path}: the value {literal} is not a single token of "
                                  f"this model's vocabulary, so it cannot be pinned; use a string instead")
            allowed[hits[0]] = True
        return allowed


@dataclass
class Segment:
    """A run of template positions: fixed JSON text, or a hole the model fills."""

    start: int
    ids: list[int]  # template ids; mask_id where the model writes
    fixed: str | None = None  # rendered text of a fixed segment
    kind: str = ""  # hole kind: string, integer, literal
    schema: dict = field(default_factory=dict)

    @property
    def end(self) -> int:
        return self.start + len(self.ids)


class Layout:
    """A schema laid out on the generated region: template ids, per-position token sets, rendering."""

    def __init__(self, vocab: Vocabulary, encode: Callable[[str], list[int]], mask_id: int, schema: Any,
                 frame: tuple[str, str] = ("", "")):
        """`frame`: fixed text around the value (a forced tool call's name and braces)."""
        self.vocab, self.encode, self.mask_id = vocab, encode, mask_id
        self.segments: list[Segment] = []
        self.allowed: dict[int, np.ndarray] = {}  # position -> bool[vocab]
        self._pending = frame[0]
        self._value(schema, "$")
        self._fixed(frame[1])
        self._flush()

    @property
    def length(self) -> int:
        return self.segments[-1].end if self.segments else 0

    def template(self, gen_length: int) -> np.ndarray:
        """int64[gen_length]: the pinned ids, mask_id in holes, end-of-text after the layout."""
        ids = [i for s in self.segments for i in s.ids]
        return np.asarray(ids + [self.vocab.filler] * (gen_length - len(ids)), dtype=np.int64)

    def mask_logits(self, logits: np.ndarray, start: int) -> None:
        """Set -inf on every token a hole position may not hold (logits [B, L, V], region at `start`)."""
        for position, allowed in self.allowed.items():
            row = logits[:, start + position, :]
            row[:, : len(allowed)][:, ~allowed] = -np.inf
            row[:, len(allowed):] = -np.inf  # rows past the tokenizer's vocabulary

    # ------------------------------------------------------------------ building
    def _fixed(self, text: str) -> None:
        self._pending += text

    def _flush(self) -> None:
        if self._pending:
            ids = self.encode(self._pending)
            self.segments.append(Segment(self.length, ids, fixed=self._pending))
            self._pending = ""

    def _hole(self, kind: str, schema: dict, allowed: list[np.ndarray], quoted: bool) -> None:
        self._flush()
        quote = self.encode('"') if quoted else []
        start = self.length
        for k, mask in enumerate(allowed):
            self.allowed[start + len(quote) + k] = mask
        ids = quote + [self.mask_id] * len(allowed) + quote
        self.segments.append(Segment(start, ids, kind=kind, schema=schema))

    def _value(self, schema: Any, path: str) -> None:
        if not isinstance(schema, dict):
            raise ConfigError(f"response_format schema at {path} must be an object, got {type(schema).__name__}")
        unknown = sorted(set(schema) - _KEYWORDS)
        if unknown:
            raise ConfigError(f"response_format schema at {path}: unsupported keyword(s) {', '.join(unknown)}; "
                              f"supported: objects with properties, string, integer, number, boolean, enum")
        if "enum" in schema:
            return self._enum(schema, path)
        kind = schema.get("type")
        if kind == "object":
            return self._object(schema, path)
        if kind == "string":
            return self._string(schema, path)
        if kind in ("integer", "number"):
            return self._integer(schema)
        if kind == "boolean":
            return self._hole("literal", schema, [self.vocab.literal_tokens(["true", "false"], path)], quoted=False)
        raise ConfigError(f"response_format schema at {path}: type {kind!r} is not supported "
                          f"(supported: object, string, integer, number, boolean, enum)")

    def _integer(self, schema: dict) -> None:
        """Digits; the first position may not stay empty, so the value always has one."""
        high = schema.get("maximum")
        width = len(str(int(high))) if isinstance(high, (int, float)) else NUMBER_WIDTH
        rest = self.vocab.digits | self._filler_only()
        self._hole("integer", schema, [self.vocab.digits] + [rest] * (max(1, min(width, MAX_WIDTH)) - 1), quoted=False)

    def _filler_only(self) -> np.ndarray:
        mask = np.zeros(self.vocab.size, dtype=bool)
        mask[self.vocab.filler] = True
        return mask

    def _object(self, schema: dict, path: str) -> None:
        properties = schema.get("properties", {})
        if not isinstance(properties, dict):
            raise ConfigError(f"response_format schema at {path}: 'properties' must be a map of name -> schema")
        required = schema.get("required", [])
        if not isinstance(required, list) or set(required) - set(properties):
            raise ConfigError(f"response_format schema at {path}: 'required' must list names from 'properties'")
        self._fixed("{")
        for n, (name, sub) in enumerate(properties.items()):
            self._fixed(("," if n else "") + json.dumps(name, ensure_ascii=False) + ":")
            self._value(sub, f"{path}.{name}")
        self._fixed("}")

    def _string(self, schema: dict, path: str) -> None:
        longest, shortest = schema.get("maxLength"), schema.get("minLength", 0)
        for name, value in (("maxLength", longest), ("minLength", shortest)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise ConfigError(f"response_format schema at {path}: {name} must be an integer >= 0")
        width = max(1, min(longest if longest is not None else STRING_WIDTH, MAX_WIDTH))
        if shortest > width:
            raise ConfigError(f"response_format schema at {path}: minLength {shortest} exceeds the hole of {width}")
        text, empty = self.vocab.string, self.vocab.string | self._filler_only()
        self._hole("string", schema, [text] * shortest + [empty] * (width - shortest), quoted=True)

    def _enum(self, schema: dict, path: str) -> None:
        values = schema["enum"]
        if not isinstance(values, list) or not values:
            raise ConfigError(f"response_format schema at {path}: enum must be a non-empty list")
        literals = [json.dumps(v, ensure_ascii=False) for v in values]
        self._hole("literal", schema, [self.vocab.literal_tokens(literals, path)], quoted=False)

    # ------------------------------------------------------------------ rendering
    def render(self, canvas: np.ndarray, decode: Callable[[Sequence[int]], str], unset: int) -> tuple[str, bool]:
        """Text of the leading segments that are fully committed, and whether that is all of them."""
        out = []
        for segment in self.segments:
            ids = canvas[segment.start:segment.end]
            if (ids == unset).any():
                return "".join(out), False
            out.append(segment.fixed if segment.fixed is not None else self._render_hole(segment, ids, decode))
        return "".join(out), True

    def _render_hole(self, segment: Segment, ids: np.ndarray, decode: Callable[[Sequence[int]], str]) -> str:
        holes = [int(i) for i, t in zip(ids, segment.ids) if t == self.mask_id]
        if segment.kind == "literal":
            return self.vocab.pieces[holes[0]]
        text = decode([i for i in holes if i != self.vocab.filler])
        if segment.kind == "string":
            limit = segment.schema.get("maxLength")
            return json.dumps(text if limit is None else text[:limit], ensure_ascii=False)
        value = int(text) if text.isdigit() else 0
        low, high = segment.schema.get("minimum"), segment.schema.get("maximum")
        if isinstance(low, (int, float)) and value < low:
            value = int(-(-low // 1))
        if isinstance(high, (int, float)) and value > high:
            value = int(high // 1)
        return str(value)
