"""Rollouts on a Ray cluster of two nodes (`ray start` on 127.0.0.1, as infra/'s RayCluster runs
them): the driver stays out of the nodes, ships the code it runs, and both nodes score."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO
from tests.ray_nodes import RayNodes
from tests.rl.toy_repo import remove_toy_repository, write_toy_repository

pytestmark = [pytest.mark.engine, pytest.mark.slow]

# The driver: the toy repository's clamp task, three bodies twice, scored on the cluster.
DRIVER = """
import json, sys
from pathlib import Path
from rl.rollouts import score
from tests.rl.test_rollouts import CLAMP_TESTS, _body
from tests.rl.toy_repo import toy_task

clamp = toy_task(Path(sys.argv[2]), "clamp", CLAMP_TESTS)
bodies = [clamp.original_body, _body(clamp, "return max(x, low)"), _body(clamp, "raise ValueError")] * 2
results = score([clamp] * len(bodies), bodies, backend="ray", address=sys.argv[1], workers=2)
print(json.dumps([r.reward for r in results]))
"""


def test_rollouts_are_scored_on_both_nodes_of_a_cluster():
    package = write_toy_repository()
    cluster = RayNodes()
    try:
        cluster.start_node("head", {"head": 1}, head=True)
        cluster.start_node("worker", {"worker": 1})
        cluster.wait_for(2)
        done = subprocess.run(
            [sys.executable, "-c", DRIVER, cluster.address, str(package)],
            cwd=REPO,
            env=cluster.env | {"PYTHONPATH": str(REPO)},
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-4000:]
        assert json.loads(done.stdout.strip().splitlines()[-1]) == [1.0, 0.5, 0.0] * 2
        # Each node started workers of its own for the rollouts (one CPU a node, two chunks at once).
        for node in ("head", "worker"):
            assert list((cluster.root / node).glob("session_*/logs/python-core-worker-*.log")), node
    finally:
        cluster.stop()
        remove_toy_repository(package)
