"""``backend="local"``: read and tokenize in this process, one unit ahead in a background thread.

Parquet decoding and HF tokenizers release the GIL, so one reader thread overlaps with the
training step; the units it produces are the very ones the Ray backend's tasks produce.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

from streaming_loader.plan import StreamPlan
from streaming_loader.tokenize import TokenizerSpec
from streaming_loader.units import UnitTokens, tokenize_unit


class LocalBackend:
    def __init__(self, plan: StreamPlan, tokenizer: TokenizerSpec, prefetch: int = 1) -> None:
        self.plan, self.tokenizer, self.prefetch = plan, tokenizer, prefetch
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="loader-read") if prefetch else None
        self._ready: dict[int, collections.deque[Future]] = {}

    def open(self, component: int, shard: int, epoch: int, position: int) -> Iterator[UnitTokens]:
        units = self.plan.units_from(component, shard, epoch, position)
        if self._pool is None:
            return (tokenize_unit(self.plan, self.tokenizer, unit) for unit in units)
        return self._prefetched(units)

    def _prefetched(self, units) -> Iterator[UnitTokens]:
        queue: collections.deque[Future] = collections.deque()
        key = id(queue)
        self._ready[key] = queue
        try:
            while True:
                while len(queue) <= self.prefetch:
                    queue.append(self._pool.submit(tokenize_unit, self.plan, self.tokenizer, next(units)))
                yield queue.popleft().result()
        finally:
            for future in queue:
                future.cancel()
            self._ready.pop(key, None)

    def buffered(self) -> int:
        """Units read and tokenized ahead of the packers."""
        return sum(f.done() for queue in list(self._ready.values()) for f in queue)

    def reset(self) -> None:
        """Nothing to stop: each sub-stream's prefetch ends with it."""

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
