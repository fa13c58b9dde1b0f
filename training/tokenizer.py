"""The embedded model's tokenizer: byte-level BPE trained on the task generator's text.

Digits are split one per token so arithmetic sees place values, and a space is
always its own token so a word tokenizes the same wherever it stands; the chat-role,
mask and end tokens of LLaDA's vocabulary are added as specials with the same
strings, so the LLaDA chat template and the runtime's special-id lookups apply.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from unmask.manifest import write_text_atomic
from unmask.tasks import BOS, CHAT_TEMPLATE, EOS, EOT, MASK, SPECIAL_TOKENS


def train_tokenizer(texts: Iterable[str], vocab_size: int = 1024) -> Tokenizer:
    """A byte-level BPE over `texts`; special tokens take the first ids (BOS 0, EOS 1, mask 2, ...)."""
    tokenizer = Tokenizer(models.BPE())
    # Spaces are tokens of their own, so a word is the same token in the prompt and in the
    # answer (" Paris" in a request, "Paris" inside JSON quotes): copying is identity, not a lookup.
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(" ", behavior="isolated"),
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer


def special_ids(tokenizer: Tokenizer) -> dict[str, int]:
    ids = {"bos": BOS, "eos": EOS, "mask": MASK, "eot": EOT}
    return {name: tokenizer.token_to_id(token) for name, token in ids.items()}


def save_tokenizer(tokenizer: Tokenizer, out_dir: str | os.PathLike) -> None:
    """tokenizer.json plus the tokenizer_config.json / special_tokens_map.json an HF folder carries."""
    out = Path(out_dir)
    write_text_atomic(out / "tokenizer.json", tokenizer.to_str())
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS, "eos_token": EOS, "pad_token": EOS, "mask_token": MASK,
        "additional_special_tokens": [t for t in SPECIAL_TOKENS if t not in (BOS, EOS, MASK)],
        "chat_template": CHAT_TEMPLATE,
        "model_max_length": 4096,
        "clean_up_tokenization_spaces": False,
    }
    write_text_atomic(out / "tokenizer_config.json", json.dumps(config, indent=2) + "\n")
    specials = {k: config[k] for k in ("bos_token", "eos_token", "pad_token", "mask_token", "additional_special_tokens")}
    write_text_atomic(out / "special_tokens_map.json", json.dumps(specials, indent=2) + "\n")
