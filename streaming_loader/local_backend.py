"""``backend="local"``: read and tokenize in this process, in background threads.

Parquet decoding and HF tokenizers release the GIL, so the reader threads overlap with the
training step; the units they produce are the very ones the Ray backend's actors produce. Each
reader thread tokenizes on its own thread, not through the tokenizer's thread pool
(``start_one_thread_tokenizing``, for as long as the backend is open), so there is one reader
thread per CPU this process may use (at least two: each unit's Python parts, turning Arrow
strings into ``str`` and token ids into an array, hold the GIL, and while one thread does that
another tokenizes; at most ``MAX_READER_THREADS``, past which they would mostly wait for the
GIL). A sub-stream asks for its first unit when it is opened, so a batch's sub-streams are read
together, not one after another, and for the units after it only once that first unit is in:
the first batch waits for nothing else (its CPU time fell from 0.7-1.2 s to 0.6-0.7 s on the
loader benchmark). Its second unit is asked for alone too, when the packer wants it, and read-ahead
starts from the third: when the first batch needs two units of every sub-stream (a first unit cut
small, as tiny files' inflated size estimates make it), it does not wait behind every
sub-stream's third, which read-ahead would have queued before the others' seconds.
"""

from __future__ import annotations

import collections
import os
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

from streaming_loader.plan import StreamPlan, Unit
from streaming_loader.tokenize import TokenizerSpec, start_one_thread_tokenizing, stop_one_thread_tokenizing
from streaming_loader.units import UnitTokens, tokenize_unit

MAX_READER_THREADS = 8


def reader_threads() -> int:
    return max(2, min(MAX_READER_THREADS, len(os.sched_getaffinity(0))))


class LocalBackend:
    def __init__(self, plan: StreamPlan, tokenizer: TokenizerSpec, prefetch: int = 1) -> None:
        self.plan, self.tokenizer, self.prefetch = plan, tokenizer, prefetch
        self._pool = (
            ThreadPoolExecutor(max_workers=reader_threads(), thread_name_prefix="loader-read") if prefetch else None
        )
        self._ready: dict[int, collections.deque[Future]] = {}
        if self._pool is not None:
            start_one_thread_tokenizing()

    def open(self, component: int, shard: int, epoch: int, position: int) -> Iterator[UnitTokens]:
        units = self.plan.units_from(component, shard, epoch, position)
        if self._pool is None:
            return (tokenize_unit(self.plan, self.tokenizer, unit) for unit in units)
        queue: collections.deque[Future] = collections.deque([self._read(next(units))])
        self._ready[id(queue)] = queue
        return self._prefetched(units, queue)

    def _read(self, unit: Unit) -> Future:
        return self._pool.submit(tokenize_unit, self.plan, self.tokenizer, unit)

    def _prefetched(self, units: Iterator[Unit], queue: collections.deque[Future]) -> Iterator[UnitTokens]:
        try:
            yield queue.popleft().result()  # the first unit, asked for at open: nothing else competes with it
            queue.append(self._read(next(units)))
            yield queue.popleft().result()  # the second, asked alone (see the module's docstring)
            while True:
                while len(queue) <= self.prefetch:
                    queue.append(self._read(next(units)))
                yield queue.popleft().result()
        finally:
            self._forget(queue)

    def _forget(self, queue: collections.deque[Future]) -> None:
        for future in queue:
            future.cancel()
        queue.clear()
        self._ready.pop(id(queue), None)

    def buffered(self) -> int:
        """Units read and tokenized ahead of the packers."""
        return sum(f.done() for queue in list(self._ready.values()) for f in queue)

    def reset(self) -> None:
        """Cancel the reads of sub-streams that were opened but never read (the loader is seeking)."""
        for queue in list(self._ready.values()):
            self._forget(queue)

    def close(self) -> None:
        self.reset()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
            stop_one_thread_tokenizing()
