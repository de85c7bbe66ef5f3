"""The loader on a two-node Ray cluster (`ray start --head` and `ray start --address`, each a
node of its own): the stream of backend="local", read on both nodes, through a node's death,
a node that joins, and a stalled GCS."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from mixtures.pin import pin
from mixtures.spec import spec_from_dict
from tests.conftest import REPO
from tests.corpora import make_table
from tests.ray_nodes import RayNodes, session_members
from tests.streaming_loader.conftest import SMALL
from tests.streaming_loader.test_loader import same, take
from tests.streaming_loader.test_ray import BIG, loader

pytestmark = [pytest.mark.engine, pytest.mark.slow]

DECOY = "raise ImportError('a Ray worker imported its own {name}, not the code the driver runs')\n"


@pytest.fixture(scope="module")
def nodes(tmp_path_factory):
    # Each node's PYTHONPATH leads to packages that refuse to import: a reader task that imports
    # anything but the code the loader shipped fails the stream.
    decoys = tmp_path_factory.mktemp("node-site")
    for name in ("lakehouse", "mixtures", "streaming_loader"):
        (decoys / name).mkdir()
        (decoys / name / "__init__.py").write_text(DECOY.format(name=name))
    cluster = RayNodes(env={"PYTHONPATH": str(decoys)})
    try:
        cluster.start_node("head", {"head": 1}, head=True)
        cluster.start_node("worker", {"worker": 1})
        cluster.wait_for(2)
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def big_manifest(mixture):
    """One component big enough that the stream is still running when the node dies."""
    make_table(mixture.catalog, "raw.big_nodes", 4000, files=2, seed=5, max_len=400)
    path = mixture.home / "big-nodes.json"
    spec = spec_from_dict({"components": [{"name": "big", "table": "raw.big_nodes", "weight": 1}]})
    pin(mixture.catalog, spec).save(path)
    return path


def run_driver(nodes: RayNodes, tmp_path, manifest, mixture, batches: int, options: dict, kill=False, holds=()):
    """The driver's batches, its error, and how many reads ran on each node. ``holds``: (a batch, a
    function, seconds), the function run while the loader is held before that batch
    (``FACTORY_PAUSE_AT``), which must come within those seconds of the hold before it."""
    out, seen = tmp_path / "batches.pt", tmp_path / "nodes"
    seen.mkdir()
    args = [nodes.address, str(manifest), str(mixture.tokenizer), str(out), str(batches), json.dumps(options)]
    if kill:
        args += [str(batches // 3), str(nodes.nodes["worker"].pid)]
    # The driver runs outside the checkout (Ray would put its working folder on the workers'
    # path): only what the loader ships reaches the workers.
    env = {**os.environ, "PYTHONPATH": str(REPO), "FACTORY_TEST_NODES_DIR": str(seen), "RAY_AUTH_MODE": "disabled"}
    folders = [tmp_path / f"hold-{batch}" for batch, _, _ in holds]
    for folder in folders:
        folder.mkdir()
    if holds:
        env["FACTORY_PAUSE_AT"] = ";".join(f"loader-next-{b}:{f}" for (b, _, _), f in zip(holds, folders, strict=True))
    log = tmp_path / "driver.log"
    with log.open("w") as output:
        driver = subprocess.Popen(
            [sys.executable, "-m", "tests.streaming_loader.ray_driver", *args],
            cwd=tmp_path, env=env, stdout=output, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        try:
            for (batch, action, seconds), folder in zip(holds, folders, strict=True):
                deadline = time.monotonic() + seconds
                while not (folder / "paused").exists():
                    assert driver.poll() is None, log.read_text()[-4000:]
                    assert time.monotonic() < deadline, f"no batch {batch} in {seconds} s:\n{log.read_text()[-4000:]}"
                    time.sleep(0.2)
                action()
                (folder / "resume").touch()
            driver.wait(timeout=400)
        finally:
            driver.kill()
    assert driver.returncode == 0, log.read_text()[-4000:]
    result = torch.load(out, weights_only=True)
    reads = {p.name: len(p.read_text().split()) for p in seen.iterdir()}
    return result["batches"], result["error"], reads


def test_the_loader_reads_on_both_nodes_and_gives_the_local_stream(nodes, mixture, tmp_path):
    with loader(mixture, "local") as local:
        reference = take(local, 30)
    got, error, reads = run_driver(nodes, tmp_path, mixture.manifest, mixture, 30, SMALL)
    assert error is None
    assert same(got, reference)
    assert len(reads) == 2, reads  # reader tasks ran on the head and on the worker node


def test_a_node_killed_mid_stream_gives_the_same_stream_or_fails_clearly(nodes, mixture, big_manifest, tmp_path):
    with loader(mixture, "local", big_manifest, **BIG) as local:
        reference = take(local, 24)
    got, error, _reads = run_driver(nodes, tmp_path, big_manifest, mixture, 24, BIG, kill=True)
    assert nodes.nodes["worker"].poll() is not None  # the worker node is gone
    print(f"after the worker node's death: {error or f'the same stream, {len(got)} batches'}")  # which of the two
    if error is None:
        assert same(got, reference)
    else:
        assert error.startswith("lakehouse.errors.StreamError") and "Ray readers failed" in error, error
        assert same(got, reference[: len(got)]) and len(got) >= 8  # what came before the death was right


def test_a_node_that_joins_mid_stream_gets_readers_and_the_stream_is_the_same(nodes, mixture, big_manifest, tmp_path):
    options = {**BIG, "num_shards": 8}  # sub-streams enough to keep every reader busy
    with loader(mixture, "local", big_manifest, **options) as local:
        reference = take(local, 24)
    alive = sum(node.poll() is None for node in nodes.nodes.values())

    def add_node() -> None:
        nodes.start_node("late", {"late": 1})
        nodes.wait_for(alive + 1, watch=("late",))

    got, error, reads = run_driver(nodes, tmp_path, big_manifest, mixture, 24, options, holds=[(8, add_node, 300)])
    assert error is None
    assert same(got, reference)
    assert len(reads) == alive + 1, reads  # reads ran on the node that joined after the loader started


def test_a_stalled_control_store_does_not_hold_the_stream(nodes, mixture, big_manifest, tmp_path):
    """The loader's look for joined nodes asks Ray's control store (the GCS). Stopped (SIGSTOP, as
    an overloaded or restarting GCS answers nothing), it holds that call; reads go from the driver
    to the reader actors directly, so the stream must go on without it."""
    options = {**BIG, "num_shards": 8}
    with loader(mixture, "local", big_manifest, **options) as local:
        reference = take(local, 24)
    gcs = [pid for pid in session_members(nodes.nodes["head"].pid) if _name(pid) == "gcs_server"]
    assert len(gcs) == 1, gcs

    def stop_gcs() -> None:
        os.kill(gcs[0], signal.SIGSTOP)
        time.sleep(1)  # a look is due (every 0.5 s in ray_driver) when the loader goes on

    try:
        # Batches 8 to 20 within 45 s, as raylets give up on a silent GCS after 60.
        holds = [(8, stop_gcs, 300), (20, lambda: os.kill(gcs[0], signal.SIGCONT), 45)]
        got, error, _reads = run_driver(nodes, tmp_path, big_manifest, mixture, 24, options, holds=holds)
    finally:
        os.kill(gcs[0], signal.SIGCONT)
    assert error is None
    assert same(got, reference)


def _name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""
