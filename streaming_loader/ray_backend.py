"""``backend="ray"``: Ray Data streaming execution reads and tokenizes; this process packs.

One Ray Data pipeline at a time serves all of this rank's sub-streams (a logical shard's share
of one component each): ``from_items(units).map_batches(read + tokenize)`` with
``preserve_order``, its tasks spread over the cluster. What a pipeline covers is decided by
demand: each sub-stream may have at most ``units_ahead`` units queued or in flight, and a new
pipeline tops every sub-stream up to that when half of what was ahead has been used, or at once
when one runs dry. Memory is thus bounded by ``units_ahead`` units per sub-stream, however long
the run and whatever the corpus size. Ray Data's iterator cannot be checkpointed, so the loader
keeps its own cursors; after ``load_state_dict`` the pipelines start at the units holding them.

Why one pipeline for all sub-streams rather than one each: Ray Data shares the cluster's CPUs
among concurrent datasets, so sixteen concurrent pipelines on a small node each got less than
a CPU and starved (measured: minutes for a handful of batches). And why not one endless
pipeline: a dataset's inputs are fixed when it starts, while which sub-stream needs the next
unit depends on how many tokens the documents turn out to have.

Reader tasks are pure functions of their unit, so a task retried after its worker died gives
the same tokens and the stream stays identical. Past ``MAX_TASK_RETRIES`` the loader fails,
naming what it was reading.
"""

from __future__ import annotations

import atexit
import collections
import importlib
import itertools
import logging
import os
import warnings
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from lakehouse.errors import FactoryError, StreamError
from streaming_loader.plan import StreamPlan, Unit
from streaming_loader.tokenize import TokenizerSpec
from streaming_loader.units import UnitTokens, empty_like, tokenize_unit

log = logging.getLogger("factory.loader")

MAX_TASK_RETRIES = 3
# Ray Data retries a task whose worker died without bound (max_retries=-1); bound it so a
# reader that keeps dying fails the stream clearly. Ray 2.60 has no named parameter for it yet.
_TASK_OPTIONS = {"max_retries": MAX_TASK_RETRIES}
_UNIT_FIELDS = ("component", "shard", "epoch", "first", "count")
_OUTPUT_SCHEMA = pa.schema(
    [
        ("seq", pa.int64()),
        ("n", pa.int64()),
        ("position", pa.int64()),
        ("tokens", pa.list_(pa.int32())),
        ("error", pa.string()),
    ]
)
# n of a row that carries a reader's FactoryError instead of documents (see _read_and_tokenize).
_FAILED = -1
# The plan and tokenizer a worker has already fetched, by object id (one loader's worth).
_WORKER_CACHE: dict[str, tuple[StreamPlan, TokenizerSpec]] = {}
# Backends not closed yet, closed at exit by _close_at_exit.
_OPEN: weakref.WeakSet[RayBackend] = weakref.WeakSet()


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

    A script that never calls ``close()`` would otherwise leave its pipelines to the garbage
    collector, after Ray is gone: a pipeline's executor thread then calls Ray, which starts a new
    local Ray from that thread and can hang the exit in connect. Ray registers its hook when
    ``ray`` is imported; ``atexit`` runs hooks last-in, first-out, so ours, registered after that
    import, runs first.
    """
    atexit.unregister(_close_at_exit)
    atexit.register(_close_at_exit)


def _close_at_exit() -> None:
    for backend in list(_OPEN):
        try:
            backend.close()
        except Exception as exc:  # an exit hook that raised would print a traceback and close no more
            log.warning("closing the loader's Ray pipelines at exit failed: %s", exc)


@dataclass
class _Feed:
    """One open sub-stream: the units still to schedule, and those ready or on their way."""

    frontier: Iterator[Unit]
    ready: collections.deque[UnitTokens] = field(default_factory=collections.deque)
    pending: int = 0

    @property
    def ahead(self) -> int:
        return len(self.ready) + self.pending


@dataclass
class _Pipeline:
    """A running Ray Data pipeline and how many of its units have not arrived yet."""

    outputs: Iterator[tuple[int, UnitTokens]]
    left: int


class RayBackend:
    # Two pipelines may run at once, so the readers never wait for one to drain before the next
    # starts; Ray Data shares the CPUs between them.
    MAX_LIVE = 2

    def __init__(self, plan: StreamPlan, tokenizer: TokenizerSpec, *, address: str | None, units_ahead: int) -> None:
        import ray
        import ray.data  # configures Ray Data's loggers, which the next lines quieten

        ensure_ray(address)
        _close_before_ray_shuts_down()
        logging.getLogger("ray.data").setLevel(logging.WARNING)
        self.plan, self.tokenizer, self.units_ahead = plan, tokenizer, units_ahead
        self._shared = ray.put((plan, tokenizer))
        self._feeds: dict[int, _Feed] = {}
        self._ids = itertools.count()
        self._live: collections.deque[_Pipeline] = collections.deque()
        self.pipelines = 0
        """Pipelines started so far (for tests and the benchmark)."""
        _OPEN.add(self)

    def open(self, component: int, shard: int, epoch: int, position: int) -> Iterator[UnitTokens]:
        # The feed counts from now, not from the first next(): the next pipeline already reads for it.
        key = next(self._ids)
        self._feeds[key] = _Feed(self.plan.units_from(component, shard, epoch, position))
        return self._units(key)

    def _units(self, key: int) -> Iterator[UnitTokens]:
        """A sub-stream's units as they arrive (a feed whose iterator never started goes at reset)."""
        try:
            while True:
                yield self._get(key)
        finally:
            self._feeds.pop(key, None)  # units still coming for it are dropped on arrival

    def buffered(self) -> int:
        """Units read and tokenized, waiting in this process for the packers."""
        return sum(len(f.ready) for f in self._feeds.values())

    def reset(self) -> None:
        """Stop the pipelines (every sub-stream has been closed: the loader is seeking)."""
        for pipeline in self._live:
            pipeline.outputs.close()
        self._live.clear()
        self._feeds.clear()

    def close(self) -> None:
        self.reset()
        self._shared = None
        _OPEN.discard(self)

    def _get(self, key: int) -> UnitTokens:
        feed = self._feeds[key]
        while not feed.ready:
            if not self._live or (feed.pending == 0 and len(self._live) < self.MAX_LIVE):
                self._start(urgent=key)
            self._pull()
        unit = feed.ready.popleft()
        if len(self._live) < self.MAX_LIVE and self._want() * 2 >= self.units_ahead * len(self._feeds):
            self._start(urgent=None)  # keep the readers busy while the packers eat what is queued
        return unit

    def _want(self) -> int:
        return sum(max(0, self.units_ahead - f.ahead) for f in self._feeds.values())

    def _start(self, urgent: int | None) -> None:
        """A pipeline topping every open sub-stream up to ``units_ahead`` units, neediest first."""
        keys = sorted(self._feeds, key=lambda k: (k != urgent, self._feeds[k].ahead, k))
        added = dict.fromkeys(keys, 0)
        order: list[tuple[int, Unit]] = []
        for _ in range(self.units_ahead):  # round-robin, so every sub-stream's next unit comes early
            for key in keys:
                feed = self._feeds[key]
                if feed.ahead + added[key] < self.units_ahead:
                    order.append((key, next(feed.frontier)))
                    added[key] += 1
        if not order:
            return
        for key, _ in order:
            self._feeds[key].pending += 1
        self._live.append(_Pipeline(self._pipeline(order), len(order)))
        self.pipelines += 1

    def _pull(self) -> None:
        """The next unit of the oldest pipeline (a sub-stream's units arrive in order that way)."""
        pipeline = self._live[0]
        key, unit = next(pipeline.outputs)
        pipeline.left -= 1
        if pipeline.left == 0:
            pipeline.outputs.close()
            self._live.popleft()
        feed = self._feeds.get(key)
        if feed is not None:
            feed.pending -= 1
            feed.ready.append(unit)

    def _pipeline(self, order: list[tuple[int, Unit]]) -> Iterator[tuple[int, UnitTokens]]:
        import ray.data

        items = [{"seq": i, **{f: getattr(u, f) for f in _UNIT_FIELDS}} for i, (_, u) in enumerate(order)]
        with warnings.catch_warnings():  # "ray_remote_args is deprecated": see _TASK_OPTIONS
            warnings.simplefilter("ignore", DeprecationWarning)
            dataset = ray.data.from_items(items, override_num_blocks=len(items)).map_batches(
                _read_and_tokenize,
                batch_size=None,
                batch_format="numpy",
                fn_kwargs={"shared": self._shared},
                **_TASK_OPTIONS,
            )
        context = dataset.context
        context.execution_options.preserve_order = True
        context.execution_options.verbose_progress = False
        context.enable_progress_bars = False
        # The pipeline has one operator and bounded input: reserving half the CPUs for operator
        # outputs only left a CPU idle (measured 3.4 s vs 2.2 s for 4 CPU-seconds on 2 CPUs).
        context.op_resource_reservation_enabled = False
        batches = iter(dataset.iter_batches(batch_size=None, batch_format="pyarrow", prefetch_batches=1))
        try:
            for seq, unit in enumerate(self._assemble(batches, [u for _, u in order])):
                yield order[seq][0], unit
        finally:
            if hasattr(batches, "close"):
                batches.close()  # shuts the pipeline's executor down when the loader seeks or closes

    def _assemble(self, batches, chunk: list[Unit]) -> Iterator[UnitTokens]:
        """Whole units, in order, from Ray Data's batches (which may cut or merge them)."""
        parts: list[pa.Table] = []
        expected = 0
        while expected < len(chunk):
            try:
                table = next(batches)
            except StopIteration:
                raise StreamError(f"Ray Data ended after {expected} of {len(chunk)} units") from None
            except Exception as exc:
                raise _explain(exc) from exc
            seqs = table.column("seq").to_numpy()
            cuts = [0, *(np.flatnonzero(np.diff(seqs)) + 1).tolist(), len(seqs)]
            for a, b in itertools.pairwise(cuts):
                if int(seqs[a]) != expected:
                    raise StreamError(f"Ray Data returned unit {seqs[a]} where unit {expected} was due")
                parts.append(table.slice(a, b - a))
                n = int(table.column("n")[a].as_py())
                if n == _FAILED:
                    raise _reraise(table.column("error")[a].as_py())
                if sum(p.num_rows for p in parts) >= max(n, 1):
                    yield _to_unit(self.plan, chunk[expected], pa.concat_tables(parts), n)
                    parts, expected = [], expected + 1


def _read_and_tokenize(batch: dict[str, np.ndarray], shared: Any) -> pa.Table:
    """Ray Data task: one unit read and tokenized, as one row per document.

    A unit without documents gives one sentinel row, so the consumer sees where it ends. Our
    own errors (a missing or corrupt file) travel as a row too: raised, Ray Data would wrap
    them and lose their type and message on the way, and retrying would not help.
    """
    plan, tokenizer = _fetch(shared)
    tables = []
    for i in range(len(batch["seq"])):
        unit = Unit(**{f: int(batch[f][i]) for f in _UNIT_FIELDS})
        seq = int(batch["seq"][i])
        try:
            done = tokenize_unit(plan, tokenizer, unit)
        except FactoryError as exc:
            error = f"{type(exc).__name__}:{exc}"
            tables.append(_row(seq, _FAILED, error))
            continue
        if done.n_docs == 0:
            tables.append(_row(seq, 0, None))
            continue
        tokens = pa.ListArray.from_arrays(pa.array(done.offsets.astype(np.int32)), pa.array(done.tokens))
        tables.append(
            pa.table(
                {
                    "seq": np.full(done.n_docs, seq, dtype=np.int64),
                    "n": np.full(done.n_docs, done.n_docs, dtype=np.int64),
                    "position": done.positions,
                    "tokens": tokens,
                    "error": pa.nulls(done.n_docs, pa.string()),
                },
                schema=_OUTPUT_SCHEMA,
            )
        )
    return pa.concat_tables(tables)


def _row(seq: int, n: int, error: str | None) -> pa.Table:
    return pa.table({"seq": [seq], "n": [n], "position": [-1], "tokens": [[]], "error": [error]}, schema=_OUTPUT_SCHEMA)


def _fetch(shared: Any) -> tuple[StreamPlan, TokenizerSpec]:
    import ray

    key = shared.hex()
    if key not in _WORKER_CACHE:
        _WORKER_CACHE.clear()  # one loader at a time per worker is the common case; bound the cache
        _WORKER_CACHE[key] = ray.get(shared)
    return _WORKER_CACHE[key]


def _to_unit(plan: StreamPlan, unit: Unit, table: pa.Table, n: int) -> UnitTokens:
    if n == 0:
        return empty_like(plan, unit)
    tokens = table.column("tokens").combine_chunks()
    first, end = plan.positions(unit)
    offsets = tokens.offsets.to_numpy().astype(np.int64)
    return UnitTokens(
        unit,
        first,
        end,
        table.column("position").to_numpy().astype(np.int64),
        tokens.values.to_numpy()[offsets[0] : offsets[-1]],
        offsets - offsets[0],
    )


def _reraise(error: str) -> FactoryError:
    """The FactoryError a reader task reported, as its own class."""
    import lakehouse.errors

    name, _, message = error.partition(":")
    cls = getattr(lakehouse.errors, name, FactoryError)
    return cls(message) if isinstance(cls, type) and issubclass(cls, FactoryError) else FactoryError(message)


def _explain(exc: BaseException) -> FactoryError:
    """Our own error if a reader raised one (e.g. a missing file), else a clear stream failure."""
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
