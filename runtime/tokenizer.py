"""The package tokenizer: text <-> ids, with user text never turned into control tokens.

Wraps `tokenizers.Tokenizer` from the package's tokenizer.json. Plain text is always
encoded with special-token matching switched off (`encode_special_tokens`), so a user
who types "<|eot_id|>" gets the characters, not the turn-end token. The only way a
special id enters a prompt is `special_id()`, used by the chat template encoder for
the template's own structural tokens.

A tokenizer.json comes from the package, so it is read through `checked_tokenizer_json`
first: a regular file within MAX_TOKENIZER_BYTES, nested at most MAX_JSON_DEPTH, no token
longer than MAX_TOKEN_CHARS (the tokenizers library needs ~80x a token's size in memory).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

import tokenizers

from .errors import ModelFormatError
from .manifest import read_tokenizer_json


class Tokenizer:
    """Encode/decode for one model package."""

    def __init__(self, backend: tokenizers.Tokenizer):
        self._backend = backend
        # Text handed to encode() never matches special added tokens; structural
        # tokens are inserted by id (see chat.encode_messages).
        self._backend.encode_special_tokens = True
        self.special_tokens: dict[str, int] = {
            added.content: token_id
            for token_id, added in backend.get_added_tokens_decoder().items()
            if added.special
        }

    @classmethod
    def from_file(cls, path: str | Path) -> "Tokenizer":
        path = Path(path)
        return cls.from_json(read_tokenizer_json(path), path)

    @classmethod
    def from_json(cls, text: str, source: object = "tokenizer.json") -> "Tokenizer":
        """From the text of a tokenizer.json that passed `checked_tokenizer_json`."""
        try:
            return cls(tokenizers.Tokenizer.from_str(text))
        except Exception as exc:  # tokenizers raises a bare Exception on a bad file
            raise ModelFormatError(f"cannot read tokenizer {source}: {exc}") from exc

    @property
    def vocab_size(self) -> int:
        return self._backend.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, *, add_special_tokens: bool = False) -> list[int]:
        """Ids of `text` as ordinary text; `add_special_tokens` applies the tokenizer's own
        post-processor (e.g. a BOS it prepends), never matches special strings in `text`."""
        return list(self._backend.encode(text, add_special_tokens=add_special_tokens).ids)

    def special_id(self, token: str) -> int:
        """Id of a special token string (as written by the chat template)."""
        token_id = self.special_tokens.get(token)
        if token_id is None:
            raise ModelFormatError(f"{token!r} is not a special token of this tokenizer")
        return token_id

    def id_to_token(self, token_id: int) -> str | None:
        """The vocabulary string of one id (None when out of range)."""
        return self._backend.id_to_token(int(token_id))

    def decode(self, ids: Iterable[int], *, skip_special_tokens: bool = True) -> str:
        return self._backend.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)
