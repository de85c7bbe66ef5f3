"""``backend="ray"``: reader actors read and tokenize, fed by demand; this process packs.

Every node of the Ray cluster runs reader actors (``_Readers``) for this loader, one thread per
CPU the loader's share of the node allows, each thread tokenizing on its own thread rather than
through the tokenizer's pool, as the local backend's threads do. A node that joins later (an
autoscaler's) gets its readers at the loader's next look, every ``_NODES_EVERY_S``, which runs
on a thread of its own: Ray's control store (GCS) answers it, and a GCS that is slow or starting
again holds that look, never the stream (reads go from this process to the actors directly). Each
sub-stream (a logical shard's share of one component) keeps up to ``units_ahead`` units asked of
them or in flight, one actor call per unit: a unit consumed is replaced at once by the
sub-stream's next, so the readers stay busy for the whole run without any pipeline to start,
drain or restart. A call returns its unit's tokens as numpy arrays, which come back through the
object store without a copy. Memory is bounded by ``units_ahead`` units per sub-stream, however
long the run and whatever the corpus size. Ray cannot checkpoint the calls, so the loader keeps
its own cursors; after ``load_state_dict`` the queued calls are cancelled and the sub-streams
start again at the units holding the new cursors.

Why actors with threads: the first version ran a Ray Data pipeline
(``from_items(units).map_batches(...)``) for each round of demand, because a dataset's inputs
are fixed when it starts while which sub-stream needs the next unit depends on how many tokens
its documents turn out to have. Each pipeline paid Ray Data's start-up and drained before the
next took over. The second asked a plain Ray task of each unit: the same units cost more CPU
in two worker processes, each calling the tokenizer's pool, than in two threads of one process
each on its own thread, and the loader stayed further below bare ``encode_batch_fast`` than
the local backend (figures in docs/benchmarks.md).

Reads are pure functions of their unit, so a read asked again after its actor (or node) died
gives the same tokens and the stream stays identical. Past ``MAX_TASK_RETRIES`` the loader
fails, naming what it was reading.
"""

from __future__ import annotations

import atexit
import collections
import importlib
import itertools
import logging
import os
import queue
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lakehouse.errors import FactoryError, StreamError
from streaming_loader.local_backend import MAX_READER_THREADS
from streaming_loader.plan import StreamPlan, Unit
from streaming_loader.tokenize import TokenizerSpec, start_one_thread_tokenizing
from streaming_loader.units import UnitTokens, tokenize_unit

log = logging.getLogger("factory.loader")

MAX_TASK_RETRIES = 3
_ACTOR_CPUS = 0.01
_RETRY_PAUSE_S = 0.5
_UNIT_FIELDS = ("component", "shard", "epoch", "first", "count")
# Backends not closed yet, closed at exit by _close_at_exit.
_OPEN: weakref.WeakSet[RayBackend] = weakref.WeakSet()
# How often buffered() asks Ray which reads are done (it is called on every batch).
_BUFFERED_EVERY_S = 1.0
# How often the loader looks for nodes that joined the cluster (an autoscaler's): one request to
# Ray's control store per rank, and nodes take minutes to come anyway.
_NODES_EVERY_S = 30.0

# The packages a reader imports (streaming_loader and the floors below it).
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

    A script that never calls ``close()`` would otherwise leave its queued reads, actors and object
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
class _Reader:
    """One reader actor, its threads, and the reads asked of it not yet taken back."""

    actor: Any
    threads: int
    node: str
    """The node it was started on (where it runs unless that node died)."""
    asked: int = 0


@dataclass
class _Feed:
    """One open sub-stream: the units still to ask for, and the reads of its next ones, in order."""

    frontier: Iterator[Unit]
    reads: collections.deque[tuple[Unit, _Reader, Any]] = field(default_factory=collections.deque)


class RayBackend:
    def __init__(
        self, plan: StreamPlan, tokenizer: TokenizerSpec, *, address: str | None, units_ahead: int, ranks: int = 1
    ) -> None:
        import ray

        ensure_ray(address)
        _close_before_ray_shuts_down()
        self.plan, self.tokenizer, self.units_ahead = plan, tokenizer, units_ahead
        self._shared = ray.put((plan, tokenizer))
        # The reader function is looked up now, not at import: a test swaps in one that records
        # where it ran.
        self._read, self._ranks = _read_and_tokenize, ranks
        nodes = _live_nodes()
        if not nodes:
            raise StreamError("the Ray cluster has no live node with a CPU to read on; add one, or use backend='local'")
        self._readers = _start_readers(self._read, ranks, nodes)
        self._live: queue.SimpleQueue[list[tuple[str, float]]] = queue.SimpleQueue()
        self._closing = threading.Event()
        # Given the queue and the event, not self, so that a backend dropped without close() is
        # collected, and its collection ends the thread.
        weakref.finalize(self, self._closing.set)
        threading.Thread(
            target=_watch_nodes, args=(self._live, self._closing), name="loader-ray-nodes", daemon=True
        ).start()
        self._feeds: dict[int, _Feed] = {}
        self._ids = itertools.count()
        self._buffered, self._buffered_at = 0, float("-inf")
        self.tasks = 0
        """Reads asked of the reader actors so far (for tests and the benchmark)."""
        self.tasks_before_first_wait: int | None = None
        """Reads asked when this process first waited for one (for tests)."""
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
                while len(feed.reads) <= self.units_ahead:  # the one about to be waited on, and those ahead
                    self._submit(feed)
                unit, reader, ref = feed.reads.popleft()
                reader.asked -= 1
                yield self._get(unit, reader, ref)
        finally:
            self._cancel(self._feeds.pop(key, feed))

    def _submit(self, feed: _Feed) -> None:
        self._join_new_nodes()
        unit = next(feed.frontier)
        reader = self._pick()
        reader.asked += 1
        feed.reads.append((unit, reader, self._ask(reader, unit)))
        self.tasks += 1

    def _join_new_nodes(self) -> None:
        """Readers on the nodes that joined the cluster, as ``_watch_nodes`` last found them: they
        take the next reads, having none waiting."""
        if self._live.empty():
            return
        live = self._live.get()
        while not self._live.empty():  # only the newest look counts
            live = self._live.get()
        known = {reader.node for reader in self._readers}
        joined = [(node, cpus) for node, cpus in live if node not in known]
        if joined:
            self._readers += _start_readers(self._read, self._ranks, joined)
            log.info("loader: reader actors started on %d node(s) that joined the Ray cluster", len(joined))

    def _pick(self, avoid: _Reader | None = None) -> _Reader:
        """The node with the fewest reads waiting per thread: a cluster's every node reads, and a
        node with more CPUs reads more."""
        readers = [r for r in self._readers if r is not avoid] or self._readers
        return min(readers, key=lambda r: r.asked / r.threads)

    def _ask(self, reader: _Reader, unit: Unit) -> Any:
        return reader.actor.read.remote([self._shared], *(getattr(unit, f) for f in _UNIT_FIELDS))

    def _get(self, unit: Unit, reader: _Reader, ref: Any) -> UnitTokens:
        """The unit's tokens. A reader killed mid-read is started again and Ray asks it again
        (``max_task_retries``); a read Ray gives up on because its reader cannot be reached
        (``ActorUnavailableError``: its node died) is asked again of another node, if any, after
        a pause that gives a reader starting again time to come back.
        """
        import ray
        from ray.exceptions import ActorUnavailableError

        if self.tasks_before_first_wait is None:
            self.tasks_before_first_wait = self.tasks
        for attempt in itertools.count(1):
            try:
                result = ray.get(ref)
                break
            except ActorUnavailableError as exc:
                if attempt > MAX_TASK_RETRIES:
                    raise _explain(exc) from exc
                log.warning("a reader of the loader cannot be reached (%s); asking another", exc)
                time.sleep(_RETRY_PAUSE_S * 2 ** (attempt - 1))
                reader = self._pick(avoid=reader)
                ref = self._ask(reader, unit)
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

            refs = [ref for feed in self._feeds.values() for _, _, ref in feed.reads]
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
        self._closing.set()
        self.reset()
        readers, self._readers, self._shared = self._readers, [], None
        _OPEN.discard(self)
        if readers:
            _stop_readers(readers)

    @staticmethod
    def _cancel(feed: _Feed) -> None:
        """Reads nobody will take: those not started yet never run (those running finish unread)."""
        if not feed.reads:  # already cancelled (at reset or close): nothing to import at interpreter exit
            return
        import ray

        if not ray.is_initialized():
            feed.reads.clear()
            return
        while feed.reads:
            _, reader, ref = feed.reads.popleft()
            reader.asked -= 1
            try:
                ray.cancel(ref)
            except Exception as exc:  # a read that already ended, or a cluster going away: nothing to stop
                log.debug("cancelling a read: %s", exc)


class _Readers:
    """Ray actor: reader threads on one node, each tokenizing on its own thread (see the module's
    docstring for why threads of one actor rather than a task per unit)."""

    def __init__(self, read: Callable[..., Any]) -> None:
        # Set here, before any read, rather than in the actor's runtime_env: a runtime_env of its
        # own makes Ray start a fresh worker process for the actor, not take one of those it keeps
        # ready, and the first batch waited for it (about two seconds more). Never stopped: the
        # setting lasts as long as the actor's process.
        start_one_thread_tokenizing()
        self._read = read
        self._shared: tuple[str, tuple[StreamPlan, TokenizerSpec]] | None = None

    def read(self, shared: list[Any], component: int, shard: int, epoch: int, first: int, count: int) -> Any:
        """``shared`` holds the plan and tokenizer's object reference inside a list, so Ray passes
        the reference rather than the value, and the actor fetches it once. (Passed to the
        constructor, it would have to outlive every restart of the actor.)"""
        plan, tokenizer = self._fetch(shared[0])
        return self._read(plan, tokenizer, Unit(component, shard, epoch, first, count))

    def _fetch(self, ref: Any) -> tuple[StreamPlan, TokenizerSpec]:
        import ray

        key = ref.hex()
        if self._shared is None or self._shared[0] != key:  # threads racing here fetch the same thing twice
            self._shared = (key, ray.get(ref))
        return self._shared[1]


def node_readers(cpus: float, ranks: int) -> list[int]:
    """The threads of each reader actor one rank's loader puts on a node with ``cpus`` CPUs.

    Every rank's loader puts its readers on every node, so a rank's share is the node's CPUs
    over ``ranks``, at least two threads (while one holds the GIL for a unit's Python parts,
    the other tokenizes). Past ``MAX_READER_THREADS`` threads a process's threads mostly wait
    for the GIL, so a bigger share is split among several actors.
    """
    share = max(2, int(cpus) // max(1, ranks))
    actors = -(-share // MAX_READER_THREADS)
    return [share // actors + (i < share % actors) for i in range(actors)]


def _live_nodes() -> list[tuple[str, float]]:
    """The id and CPUs of every live node of the cluster with a CPU to read on."""
    import ray

    found = [(n["NodeID"], n.get("Resources", {}).get("CPU", 0)) for n in ray.nodes() if n.get("Alive")]
    return [(node, cpus) for node, cpus in found if cpus >= 1]


def _watch_nodes(live: queue.SimpleQueue, closing: threading.Event) -> None:
    """Every ``_NODES_EVERY_S`` until ``closing``, the cluster's live nodes into ``live``. A look
    that fails (a GCS restarting) is logged, and the next one tries again."""
    import ray

    while not closing.wait(_NODES_EVERY_S):
        if not ray.is_initialized():  # Ray shut down under an open loader: nothing to look at
            return
        try:
            live.put(_live_nodes())
        except Exception as exc:
            log.warning(
                "loader: looking for Ray nodes that joined failed (%s); looking again in %gs", exc, _NODES_EVERY_S
            )


def _start_readers(read: Callable[..., Any], ranks: int, nodes: list[tuple[str, float]]) -> list[_Reader]:
    """Reader actors on each of ``nodes`` (id, CPUs), as many as ``node_readers`` says.

    An actor reserves a hundredth of a CPU, not its threads' worth: every rank's loader puts
    actors on every node, their threads together sized to the node's CPUs, and a reservation of
    those CPUs would leave the last ranks' actors waiting for ever. (Reserving nothing at all,
    Ray 2.60 placed actors on any node, whatever their node affinity said.) Killed, an actor is
    started again and Ray asks it again the reads it held; when its node is gone, the actor
    starts on another (soft affinity) and the loader asks other actors the reads it lost.
    """
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    remote = ray.remote(_Readers)
    readers = []
    for node, cpus in nodes:
        for threads in node_readers(cpus, ranks):
            actor = remote.options(
                num_cpus=_ACTOR_CPUS,
                max_concurrency=threads,
                max_restarts=-1,
                max_task_retries=MAX_TASK_RETRIES,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=True),
            ).remote(read)
            readers.append(_Reader(actor, threads, node))
    return readers


def _stop_readers(readers: list[_Reader]) -> None:
    import ray

    if not ray.is_initialized():
        return
    for reader in readers:
        try:
            ray.kill(reader.actor, no_restart=True)
        except Exception as exc:  # a cluster going away: nothing to stop
            log.debug("stopping a reader actor: %s", exc)


def _read_and_tokenize(
    plan: StreamPlan, tokenizer: TokenizerSpec, unit: Unit
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | str:
    """One unit read and tokenized, as (positions, flat token ids, offsets).

    Our own errors (a missing or corrupt file) come back as ``"ClassName:message"``: raised,
    Ray would wrap them in its own error, and asking again would not help.
    """
    try:
        done = tokenize_unit(plan, tokenizer, unit)
    except FactoryError as exc:
        return f"{type(exc).__name__}:{exc}"
    return done.positions, done.tokens, done.offsets


def _reraise(error: str) -> FactoryError:
    """The FactoryError a reader reported, as its own class."""
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
        f"a read is asked again {MAX_TASK_RETRIES} times when its reader dies"
    )
