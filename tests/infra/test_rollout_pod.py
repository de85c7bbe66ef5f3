"""The rollout workers' pod settings are enough for the RL sandbox: run as the manifest's uid, with
no capability and no way to gain one (allowPrivilegeEscalation: false is the kernel's no_new_privs),
rl/sandbox.py scores a repository's tests in bubblewrap's user-namespace mode. What a cluster adds
(the pod's user namespace, the unmasked /proc, the seccomp and AppArmor profiles) cannot be made
here; infra/README.md says how to check it on a node."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.infra.kustomize import build

INFRA = REPO / "infra"
# The interpreter the sandboxed tests run with: one any uid may reach, as the image's is.
CHECKOUT_PYTHON = "/usr/bin/python3"

SCORE = """
import json, sys
from rl.sandbox import Checkout, Overlay, run_harness
root, body = sys.argv[1], sys.argv[2]
checkout = Checkout(sys.argv[3], root, root + "/mypkg", "unittest")
original = root + "/mypkg/core.py"
overlay = Overlay(original, "def double(x):\\n    " + body + "\\n")
run = run_harness(checkout, mode="score", tests=["mypkg.tests.test_core.T.test_double"], overlay=overlay)
print(json.dumps({"status": run.status, "verdicts": run.verdicts, "output": run.output}))
"""


def rollout_worker_context() -> tuple[int, dict]:
    docs = build(INFRA / "k8s" / "overlays" / "gpu")
    (rollouts,) = [d for d in docs if d["metadata"]["name"] == "factory-rollouts"]
    pod = rollouts["spec"]["workerGroupSpecs"][0]["template"]["spec"]
    return pod["securityContext"]["runAsUser"], pod["containers"][0]["securityContext"]


@pytest.fixture
def repository():
    root = Path(tempfile.mkdtemp(prefix="factory-rollout-pod-"))
    try:
        (root / "mypkg" / "tests").mkdir(parents=True)
        (root / "mypkg" / "__init__.py").write_text("")
        (root / "mypkg" / "core.py").write_text("def double(x):\n    return 2 * x\n")
        (root / "mypkg" / "tests" / "__init__.py").write_text("")
        (root / "mypkg" / "tests" / "test_core.py").write_text(
            textwrap.dedent("""
                import unittest
                from mypkg.core import double

                class T(unittest.TestCase):
                    def test_double(self):
                        self.assertEqual(double(21), 42)
            """)
        )
        for path in [root, *root.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        yield root
    finally:
        shutil.rmtree(root)


def score_as_the_pod(root: Path, body: str) -> dict:
    uid, context = rollout_worker_context()
    assert context["allowPrivilegeEscalation"] is False and context["capabilities"] == {"drop": ["ALL"]}
    drop = ["--no-new-privs", "--inh-caps=-all", "--bounding-set=-all"]
    command = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", *drop, sys.executable, "-c", SCORE]
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO), "HOME": "/tmp"}
    done = subprocess.run(
        [*command, str(root), body, CHECKOUT_PYTHON], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.skipif(os.geteuid() != 0, reason="dropping to the pod's uid needs root")
@pytest.mark.skipif(not (shutil.which("bwrap") and shutil.which("setpriv")), reason="needs bubblewrap and setpriv")
def test_the_sandbox_scores_tests_as_the_rollout_pods_user_without_capabilities(repository):
    right = score_as_the_pod(repository, "return x + x")
    assert right["status"] == "ok" and right["verdicts"] == {"mypkg.tests.test_core.T.test_double": "passed"}, right
    wrong = score_as_the_pod(repository, "return x")
    assert wrong["verdicts"] == {"mypkg.tests.test_core.T.test_double": "failed"}, wrong
    assert (repository / "mypkg" / "core.py").read_text() == "def double(x):\n    return 2 * x\n"
