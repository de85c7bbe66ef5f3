"""``backend="ray"``: Ray tasks read and tokenize, fed by demand; this process packs.

Each sub-stream (a logical shard's share of one component) keeps up to ``units_ahead`` units
queued or in flight as plain Ray tasks, one task per unit: a unit consumed is replaced at once by
the sub-stream's next, so the readers stay busy for the whole run without any pipeline to start,
drain or restart. Tasks run on Ray's long-lived worker processes, which keep the plan and the
loaded tokenizer between tasks; a task returns its unit's tokens as numpy arrays, which come
back through the object store without a copy. Memory is bounded by ``units_ahead`` units per
sub-stream, however long the run and whatever the corpus size. Ray tasks cannot be
checkpointed, so the loader keeps its own cursors; after ``load_state_dict`` the queued tasks
are cancelled and the sub-streams start again at the units holding the new cursors.

Why tasks rather than Ray Data: the first version ran a Ray Data pipeline
(``from_items(units).map_batches(...)``) for each round of demand, because a dataset's inputs
are fixed when it starts while which sub-stream needs the next unit depends on how many tokens
its documents turn out to have. Each pipeline paid Ray Data's start-up (planning, an executor
thread polling in this process, Arrow blocks through ``iter_batches``) and drained before the
next took over, and workers imported Ray Data and pandas before their first unit: 0.73x bare
``encode_batch_fast`` in steady state, a first batch of 6-10 s (docs/benchmarks.md). One task per
unit is the long-lived pipeline fed by demand the loader needs, with nothing in between.

Reader tasks are pure functions of their unit, so a task retried after its worker (or node)
died gives the same tokens and the stream stays identical. Past ``MAX_TASK_RETRIES`` the loader
fails, naming what it was reading.
"""

from __future__ import annotations

import atexit
import collections
import importlib
import itertools
import logging
import os
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lakehouse.errors import FactoryError, StreamError
from streaming_loader.plan import StreamPlan, Unit
from streaming_loader.tokenize import TokenizerSpec
from streaming_loader.units import UnitTokens, tokenize_unit

log = logging.getLogger("factory.loader")

MAX_TASK_RETRIES = 3
_UNIT_FIELDS = ("component", "shard", "epoch", "first", "count")
# The plan and tokenizer a worker has already fetched, by object id (one loader's worth).
_WORKER_CACHE: dict[str, tuple[StreamPlan, TokenizerSpec]] = {}
# Backends not closed yet, closed at exit by _close_at_exit.
_OPEN: weakref.WeakSet[RayBackend] = weakref.WeakSet()
# How often buffered() asks Ray which tasks are done (it is called on every batch).
_BUFFERED_EVERY_S = 1.0

# The packages a reader task imports (streaming_loader and the floors below it).
READER_PACKAGES = ("lakehouse", "mixtures", "streaming_loader")


def ensure_ray(address: str | None) -> None:
    """Join the Ray cluster at ``address`` (or ``$RAY_ADDRESS``), or start a local one, once.

    Joining a cluster, the loader ships its own code to the workers (Ray's ``py_modules``):
    the nodes' installed packages may be another version, and a reader that tokenized
    differently would change the stream silently. A local Ray runs this process's files.
    """
    import ray

    if ray.is_initialized():
        return
    address = address or os.environ.get("RAY_ADDRESS") or None
    log.info("starting Ray (%s)", f"joining {address}" if address else "local cluster")
    runtime_env = {"py_modules": [importlib.import_module(p) for p in READER_PACKAGES]} if address else None
    ray.init(address=address, runtime_env=runtime_env, include_dashboard=False, logging_level=logging.WARNING)


def _close_before_ray_shuts_down() -> None:
    """Have every open backend closed at exit, before Ray's own exit hook shuts Ray down.

    A script that never calls ``close()`` would otherwise leave its queued tasks and object
    references to the garbage collector, after Ray is gone. Ray registers its hook when ``ray``
    is imported; ``atexit`` runs hooks last-in, first-out, so ours, registered after that
    import, runs first.
    """
    atexit.unregister(_close_at_exit)
    atexit.register(_close_at_exit)


def _close_at_exit() -> None:
    for backend in list(_OPEN):
        try:
            backend.close()
        except Exception as exc:  # an exit hook that raised would print a traceback and close no more
            log.warning("closing the loader's Ray readers at exit failed: %s", exc)


@dataclass
class _Feed:
    """One open sub-stream: the units still to ask for, and the tasks reading its next ones, in order."""

    frontier: Iterator[Unit]
    tasks: collections.deque[tuple[Unit, Any]] = field(default_factory=collections.deque)


class RayBackend:
    def __init__(self, plan: StreamPlan, tokenizer: TokenizerSpec, *, address: str | None, units_ahead: int) -> None:
        import ray

        ensure_ray(address)
        _close_before_ray_shuts_down()
        self.plan, self.tokenizer, self.units_ahead = plan, tokenizer, units_ahead
        self._shared = ray.put((plan, tokenizer))
        # Looked up now, not at import: a test swaps in a reader that records where it ran.
        # SPREAD, as Ray Data does: a cluster's every node reads, not only the driver's.
        self._read = ray.remote(_read_and_tokenize).options(
            num_cpus=1, max_retries=MAX_TASK_RETRIES, scheduling_strategy="SPREAD"
        )
        self._feeds: dict[int, _Feed] = {}
        self._ids = itertools.count()
        self._buffered, self._buffered_at = 0, float("-inf")
        self.tasks = 0
        """Reader tasks submitted so far (for tests and the benchmark)."""
        self.tasks_before_first_wait: int | None = None
        """Tasks submitted when this process first waited for one (for tests)."""
        _OPEN.add(self)

    def open(self, component: int, shard: int, epoch: int, position: int) -> Iterator[UnitTokens]:
        # The sub-stream's first unit is asked for now; the rest of its read-ahead when it is first
        # read from. The loader opens every sub-stream of a batch before it reads any, so the first
        # units of all of them are queued ahead of anyone's second.
        key = next(self._ids)
        feed = _Feed(self.plan.units_from(component, shard, epoch, position))
        self._feeds[key] = feed
        self._submit(feed)
        return self._units(key)

    def _units(self, key: int) -> Iterator[UnitTokens]:
        """A sub-stream's units as they arrive (a feed whose iterator never started goes at reset)."""
        feed = self._feeds[key]
        try:
            while True:
                while len(feed.tasks) <= self.units_ahead:  # the one about to be waited on, and those ahead
                    self._submit(feed)
                unit, ref = feed.tasks.popleft()
                yield self._get(unit, ref)
        finally:
            self._cancel(self._feeds.pop(key, feed))

    def _submit(self, feed: _Feed) -> None:
        unit = next(feed.frontier)
        feed.tasks.append((unit, self._read.remote([self._shared], *(getattr(unit, f) for f in _UNIT_FIELDS))))
        self.tasks += 1

    def _get(self, unit: Unit, ref: Any) -> UnitTokens:
        import ray

        if self.tasks_before_first_wait is None:
            self.tasks_before_first_wait = self.tasks
        try:
            result = ray.get(ref)
        except Exception as exc:
            raise _explain(exc) from exc
        if isinstance(result, str):
            raise _reraise(result)
        first, end = self.plan.positions(unit)
        positions, tokens, offsets = result
        return UnitTokens(unit, first, end, positions, tokens, offsets)

    def buffered(self) -> int:
        """Units read and tokenized, waiting for the packers (asked of Ray at most once a second)."""
        now = time.monotonic()
        if now - self._buffered_at >= _BUFFERED_EVERY_S:
            import ray

            refs = [ref for feed in self._feeds.values() for _, ref in feed.tasks]
            if refs:
                ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0, fetch_local=False)
                self._buffered = len(ready)
            else:
                self._buffered = 0
            self._buffered_at = now
        return self._buffered

    def reset(self) -> None:
        """Cancel the queued reads (every sub-stream has been closed: the loader is seeking)."""
        for feed in self._feeds.values():
            self._cancel(feed)
        self._feeds.clear()

    def close(self) -> None:
        self.reset()
        self._shared = None
        _OPEN.discard(self)

    @staticmethod
    def _cancel(feed: _Feed) -> None:
        """Tasks nobody will read: those not started yet never run (those running finish unread)."""
        if not feed.tasks:  # already cancelled (at reset or close): nothing to import at interpreter exit
            return
        import ray

        if not ray.is_initialized():
            feed.tasks.clear()
            return
        while feed.tasks:
            _, ref = feed.tasks.popleft()
            try:
                ray.cancel(ref)
            except Exception as exc:  # a task that already ended, or a cluster going away: nothing to stop
                log.debug("cancelling a reader task: %s", exc)


def _read_and_tokenize(
    shared: list[Any], component: int, shard: int, epoch: int, first: int, count: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | str:
    """Ray task: one unit read and tokenized, as (positions, flat token ids, offsets).

    ``shared`` holds the plan and tokenizer's object reference inside a list, so Ray passes the
    reference rather than the value and each worker fetches it once. Our own errors (a missing
    or corrupt file) come back as ``"ClassName:message"``: raised, Ray would wrap them in its
    own error, and retrying would not help.
    """
    plan, tokenizer = _fetch(shared[0])
    try:
        done = tokenize_unit(plan, tokenizer, Unit(component, shard, epoch, first, count))
    except FactoryError as exc:
        return f"{type(exc).__name__}:{exc}"
    return done.positions, done.tokens, done.offsets


def _fetch(shared: Any) -> tuple[StreamPlan, TokenizerSpec]:
    import ray

    key = shared.hex()
    if key not in _WORKER_CACHE:
        _WORKER_CACHE.clear()  # one loader at a time per worker is the common case; bound the cache
        _WORKER_CACHE[key] = ray.get(shared)
    return _WORKER_CACHE[key]


def _reraise(error: str) -> FactoryError:
    """The FactoryError a reader task reported, as its own class."""
    import lakehouse.errors

    name, _, message = error.partition(":")
    cls = getattr(lakehouse.errors, name, FactoryError)
    return cls(message) if isinstance(cls, type) and issubclass(cls, FactoryError) else FactoryError(message)


def _explain(exc: BaseException) -> FactoryError:
    """Our own error if a reader raised one, else a clear stream failure."""
    from ray.exceptions import RayTaskError

    found, seen, visited = None, exc, set()
    while seen is not None and id(seen) not in visited:
        visited.add(id(seen))
        if isinstance(seen, FactoryError) and not isinstance(seen, RayTaskError):
            found = seen
        seen = getattr(seen, "cause", None) or seen.__cause__
    if found is not None:
        return found
    return StreamError(
        f"the loader's Ray readers failed and the stream cannot continue ({type(exc).__name__}: {exc}); "
        f"a reader task is retried {MAX_TASK_RETRIES} times when its worker dies"
    )
