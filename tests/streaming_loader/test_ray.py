"""The Ray backend on a real local Ray: the same stream as the local backend, through faults."""

from __future__ import annotations

import gc
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from lakehouse.errors import DataFileError, StreamError
from mixtures.pin import pin
from mixtures.spec import spec_from_dict
from streaming_loader import StreamingLoader
from streaming_loader.ray_backend import node_readers
from tests.corpora import make_table
from tests.streaming_loader.conftest import SMALL
from tests.streaming_loader.test_loader import same, take

READER_TITLE = "ray::_Readers.read"


def loader(mixture, backend: str, manifest=None, **options) -> StreamingLoader:
    return StreamingLoader.from_manifest(
        manifest or mixture.manifest, mixture.tokenizer, **{**SMALL, "backend": backend, **options}
    )


def test_ray_and_local_backends_give_the_same_stream(ray_cluster, mixture):
    with loader(mixture, "local") as local, loader(mixture, "ray") as remote:
        assert same(take(remote, 30), take(local, 30))
        state = remote.state_dict()
        assert state == local.state_dict()
        assert remote._backend.tasks > 30  # the stream went through many reader tasks
    with (
        loader(mixture, "ray", dp_rank=1, dp_world=2) as rank,
        loader(mixture, "local", dp_rank=1, dp_world=2) as reference,
    ):
        rank.load_state_dict(state)
        reference.load_state_dict(state)
        assert same(take(rank, 10), take(reference, 10))


def test_the_first_batch_asks_for_all_its_sub_streams_at_once(ray_cluster, mixture):
    with loader(mixture, "ray") as source:
        next(source)
        assert len(source._streams) >= 8
        # The first unit of every sub-stream was asked for before the batch waited on any (before,
        # each sub-stream asked for its units when the batch first reached it, one after another).
        assert source._backend.tasks_before_first_wait >= len(source._streams)


def test_one_reader_actor_per_node_tokenizes_on_threads_of_its_own_until_closed(ray_cluster, mixture):
    import ray
    from ray.exceptions import RayActorError

    with loader(mixture, "ray") as source:
        take(source, 30)
        (reader,) = source._backend._readers  # one node of two CPUs: one actor, two threads
        assert reader.threads == 2
        setting = reader.actor.__ray_call__.remote(lambda _: os.environ.get("TOKENIZERS_PARALLELISM"))
        assert ray.get(setting) == "false"  # each thread calls the tokenizer on its own thread
    # Closing the loader stopped its readers. Ray kills an actor asynchronously, so a call sent
    # just after ray.kill may still be answered; a reader that is never stopped fails at the deadline.
    deadline = time.monotonic() + 60
    while True:
        try:
            ray.get(reader.actor.__ray_call__.remote(lambda _: os.getpid()), timeout=60)
        except RayActorError:
            break
        assert time.monotonic() < deadline, "the loader's reader actor still answers a minute after close()"
        time.sleep(0.2)


def test_the_look_for_joined_nodes_ends_with_the_loader_closed_or_dropped(ray_cluster, mixture):
    def lookers() -> set[threading.Thread]:
        return {t for t in threading.enumerate() if t.name == "loader-ray-nodes"}

    before = lookers()  # other tests' loaders, if any are still open
    with loader(mixture, "ray") as source:
        take(source, 2)
        (closed,) = lookers() - before
    closed.join(timeout=10)
    assert not closed.is_alive()
    dropped = loader(mixture, "ray")  # never closed: a script that just lets its loader go
    take(dropped, 2)
    (collected,) = lookers() - before
    del dropped
    gc.collect()
    collected.join(timeout=10)
    assert not collected.is_alive()


@pytest.mark.parametrize(
    ("cpus", "ranks", "actors"),
    [(1, 1, [2]), (2, 4, [2]), (8, 2, [4]), (16, 1, [8, 8]), (20, 1, [7, 7, 6]), (64, 8, [8])],
)
def test_a_node_s_cpus_are_shared_among_the_ranks_readers(cpus, ranks, actors):
    assert node_readers(cpus, ranks) == actors


def files_under(root: Path, skip: tuple[str, ...] = ()) -> dict[str, int]:
    found = {}
    for path in root.rglob("*"):
        if path.is_file() and not any(part in skip for part in path.parts):
            try:
                found[str(path)] = path.stat().st_size
            except OSError:  # a log or socket that came and went
                continue
    return found


def test_nothing_tokenized_is_written_to_disk(ray_cluster, mixture):
    roots = {mixture.home: (), ray_cluster.session_dir: ("logs", "sockets"), ray_cluster.spill_dir: ()}
    before = {root: files_under(root, skip) for root, skip in roots.items()}
    with loader(mixture, "ray") as source:
        batches = take(source, 60)
    delivered = sum(b["input_ids"].numel() * 8 for b in batches)
    for root, skip in roots.items():
        after = files_under(root, skip)
        grown = {p: s - before[root].get(p, 0) for p, s in after.items() if s != before[root].get(p)}
        assert sum(grown.values()) < delivered / 10, (root, grown)  # nothing the size of the stream
    assert files_under(ray_cluster.spill_dir) == {}
    assert files_under(mixture.home) == before[mixture.home]


def test_an_unreadable_file_is_named_through_ray(ray_cluster, mixture, tmp_path):
    from mixtures.manifest import Manifest

    victim = Manifest.load(mixture.manifest).component("text").files[1].path.removeprefix("file://")
    original = Path(victim).read_bytes()
    try:
        Path(victim).write_bytes(original[:64])
        with loader(mixture, "ray") as source, pytest.raises(DataFileError, match=Path(victim).name):
            take(source, 60)
    finally:
        Path(victim).write_bytes(original)


@pytest.fixture(scope="module")
def big_manifest(mixture) -> Path:
    """One component big enough that a reader task is busy long enough to be killed."""
    make_table(mixture.catalog, "raw.big", 4000, files=2, seed=4, max_len=400)
    path = mixture.home / "big.json"
    pin(mixture.catalog, spec_from_dict({"components": [{"name": "big", "table": "raw.big", "weight": 1}]})).save(path)
    return path


BIG = {"seq_len": 4096, "global_batch_size": 8, "num_shards": 1, "shuffle_window": 256, "read_bytes": 1 << 20}


class Killer(threading.Thread):
    """SIGKILLs this cluster's worker processes while they run a reader task."""

    def __init__(self, raylet_pid: int, times: int) -> None:
        super().__init__(daemon=True)
        self.raylet_pid, self.times, self.killed, self.stop = raylet_pid, times, 0, threading.Event()

    def run(self) -> None:
        while self.killed < self.times and not self.stop.is_set():
            for pid in self._busy_readers():
                os.kill(pid, signal.SIGKILL)
                self.killed += 1
                break
            time.sleep(0.005)

    def _busy_readers(self) -> list[int]:
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                title = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")[0].decode()
                parent = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if parent == self.raylet_pid and title.startswith(READER_TITLE):
                found.append(int(entry))
        return found


@pytest.mark.slow
def test_a_reader_killed_mid_task_is_retried_and_the_stream_is_identical(ray_cluster, mixture, big_manifest):
    with loader(mixture, "local", big_manifest, **BIG) as local:
        reference = take(local, 40)
    killer = Killer(ray_cluster.raylet_pid, times=1)
    killer.start()
    with loader(mixture, "ray", big_manifest, **BIG) as remote:
        got = take(remote, 40)
    killer.stop.set()
    killer.join()
    assert killer.killed == 1
    assert same(got, reference)


@pytest.mark.slow
def test_readers_that_keep_dying_fail_the_stream_clearly(ray_cluster, mixture, big_manifest):
    killer = Killer(ray_cluster.raylet_pid, times=100)
    killer.start()
    try:
        with (
            loader(mixture, "ray", big_manifest, **BIG) as remote,
            pytest.raises(StreamError, match="Ray readers failed"),
        ):
            take(remote, 400)
    finally:
        killer.stop.set()
        killer.join()
    assert killer.killed > 3
