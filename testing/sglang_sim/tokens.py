"""A stand-in tokenizer: counts, cache keys and deterministic output text.

No model is loaded, so a token is approximated as 4 characters of text (at least 1 token per non-empty
prompt); `input_ids` are taken as given. Cache keys are chained hashes over blocks of `BLOCK_TOKENS` tokens,
so two prompts share cached blocks exactly as far as their leading text is identical (radix-tree semantics at
block granularity). Output text is filler derived from the prompt (CRC32, stable across processes), so the
same request always gets the same answer.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

CHARS_PER_TOKEN = 4
BLOCK_TOKENS = 16
VOCAB_SIZE = 32000
EOS_TOKEN_ID = 2
_WORDS = (
    " the", " sim", " of", " and", " to", " in", " is", " that", " it", " for", " on", " with", " as",
    " was", " at", " by", " this", " from", " or", " an", " be", " are", " not", " we", " can", " data",
    " node", " pod", " gpu", " load", " fast", " cache",
)  # fmt: skip


@dataclass(frozen=True)
class Prompt:
    """What the engine needs to know about an input: its length and its cache-block keys."""

    num_tokens: int
    block_keys: tuple[bytes, ...]
    seed: int  # drives the filler output

    @property
    def is_empty(self) -> bool:
        return self.num_tokens == 0


def count_text_tokens(text: str) -> int:
    return (len(text) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


def _chain(units: Sequence[bytes]) -> tuple[bytes, ...]:
    keys: list[bytes] = []
    prev = b""
    full = len(units) - len(units) % BLOCK_TOKENS
    for start in range(0, full, BLOCK_TOKENS):
        h = hashlib.blake2b(prev, digest_size=16)
        for unit in units[start : start + BLOCK_TOKENS]:
            h.update(unit)
        prev = h.digest()
        keys.append(prev)
    return tuple(keys)


def prompt_from_text(text: str) -> Prompt:
    raw = text.encode()
    units = [text[i : i + CHARS_PER_TOKEN].encode() + b"\x00" for i in range(0, len(text), CHARS_PER_TOKEN)]
    return Prompt(num_tokens=len(units), block_keys=_chain(units), seed=zlib.crc32(raw))


def prompt_from_ids(ids: Sequence[int]) -> Prompt:
    units = [int(i).to_bytes(8, "little", signed=True) for i in ids]
    return Prompt(num_tokens=len(units), block_keys=_chain(units), seed=zlib.crc32(b"".join(units)))


def output_token_ids(seed: int, n: int) -> list[int]:
    """n deterministic token ids (never EOS) for a prompt seed."""
    return [(seed * 2654435761 + 40503 * (i + 1)) % (VOCAB_SIZE - 3) + 3 for i in range(n)]


def output_text(ids: Sequence[int]) -> str:
    return "".join(_WORDS[i % len(_WORDS)] for i in ids)


def content_text(content: Any) -> str:
    """OpenAI message content: a string or a list of parts; only text parts count."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")
    return str(content)


def chat_prompt(messages: Sequence[Any]) -> str:
    """A fixed chat template, so a conversation's earlier turns are a prefix of the next turn's prompt."""
    parts = []
    for m in messages:
        if isinstance(m, dict):
            parts.append(f"<|{m.get('role', 'user')}|>\n{content_text(m.get('content'))}\n")
    parts.append("<|assistant|>\n")
    return "".join(parts)
