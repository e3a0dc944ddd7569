"""A bounded LRU prefix cache over chained block keys: the simulator's radix tree.

Each key names a block together with everything before it, so a match walks the prompt's keys from the start
and stops at the first miss, like a radix-tree descent. Lookups and inserts touch the matched path leaf
first, root last, so the least recently used entries are leaves; eviction therefore trims branches from the
tips, as SGLang's radix cache evicts leaves, rather than cutting a shared root out from under its children.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence


class PrefixCache:
    def __init__(self, capacity_tokens: int, block_tokens: int) -> None:
        self.block_tokens = block_tokens
        self.capacity_blocks = max(0, capacity_tokens // block_tokens)
        self._blocks: OrderedDict[bytes, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._blocks)

    @property
    def cached_tokens(self) -> int:
        return len(self._blocks) * self.block_tokens

    def match(self, keys: Sequence[bytes]) -> int:
        """Number of leading blocks present; refreshes them in LRU order."""
        n = 0
        for key in keys:
            if key not in self._blocks:
                break
            n += 1
        for key in reversed(keys[:n]):
            self._blocks.move_to_end(key)
        return n

    def insert(self, keys: Sequence[bytes]) -> None:
        if self.capacity_blocks == 0:
            return
        for key in reversed(keys[: self.capacity_blocks]):
            self._blocks[key] = None
            self._blocks.move_to_end(key)
        while len(self._blocks) > self.capacity_blocks:
            self._blocks.popitem(last=False)

    def clear(self) -> None:
        self._blocks.clear()
