"""A throwaway multi-node Ray cluster for the tests: a head and worker nodes started with
``ray start`` on 127.0.0.1, each in its own process group and temp dir.

Other Ray instances may run on the machine (other test sessions): teardown kills only the
process groups started here, never ``ray stop``, which stops every Ray of the user.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.ports import free_port

RAY = str(Path(sys.executable).parent / "ray")


class RayNodes:
    def __init__(self, env: dict[str, str] | None = None) -> None:
        # Short paths: Ray's socket names must fit in 107 bytes.
        self.root = Path(tempfile.mkdtemp(prefix="fray-", dir="/tmp"))
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        # Ray 2.60's `ray start` turns token authentication on; nodes on one loopback need none.
        self.env = {**os.environ, "RAY_DISABLE_USAGE_STATS": "1", "RAY_AUTH_MODE": "disabled", **(env or {})}
        self.nodes: dict[str, subprocess.Popen] = {}

    def start_node(self, name: str, resources: dict[str, float], num_cpus: int = 1, head: bool = False) -> None:
        where = (
            ["--head", "--port", str(self.port), "--include-dashboard=false"] if head else ["--address", self.address]
        )
        command = [
            RAY, "start", *where, "--block", "--num-cpus", str(num_cpus), "--resources", json.dumps(resources),
            "--node-ip-address", "127.0.0.1", "--temp-dir", str(self.root / name),
            "--object-store-memory", str(100 << 20), "--disable-usage-stats",
        ]  # fmt: skip
        log = (self.root / f"{name}.log").open("wb")
        # --block keeps `ray start` the parent of the node's processes, in a group of their own.
        self.nodes[name] = subprocess.Popen(
            command, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def wait_for(self, count: int, timeout: float = 120, watch: tuple[str, ...] | None = None) -> None:
        """Until ``count`` nodes are alive (asked from a fresh process: this one stays out of Ray).
        A node of ``watch`` (default: all) that exits meanwhile fails the wait."""
        probe = (
            "import ray, sys; ray.init(address=sys.argv[1], logging_level='ERROR');"
            "print(sum(n['Alive'] for n in ray.nodes()))"
        )
        deadline = time.monotonic() + timeout
        while True:
            done = subprocess.run(
                [sys.executable, "-c", probe, self.address], env=self.env, capture_output=True, text=True, timeout=120
            )
            if done.returncode == 0 and done.stdout.strip().splitlines()[-1] == str(count):
                return
            watched = [p for name, p in self.nodes.items() if watch is None or name in watch]
            if time.monotonic() > deadline or any(p.poll() is not None for p in watched):
                logs = "\n".join(p.read_text(errors="replace")[-1500:] for p in sorted(self.root.glob("*.log")))
                raise RuntimeError(f"the Ray nodes did not come up:\n{done.stderr[-2000:]}\n{logs}")
            time.sleep(1)

    def kill(self, name: str) -> None:
        """SIGKILL every process of a node, as if the machine it stood for died.

        A node's processes share the session `ray start` leads; its workers each make a process
        group of their own, so the session, not the group, is what holds them all.
        """
        proc = self.nodes[name]
        for pid in session_members(proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.wait()

    def stop(self) -> None:
        # Killed, not asked to stop: Ray 2.60's raylet and GCS were still there 30 s after a SIGTERM
        # to their session (and `ray start --block` waits for them), so a gentle stop only cost
        # 10 s a node before the kill. Nothing of this cluster is kept.
        for name in self.nodes:
            self.kill(name)
        shutil.rmtree(self.root, ignore_errors=True)


def session_members(sid: int) -> list[int]:
    """The processes of session ``sid``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[3]) == sid:
                found.append(int(entry))
    return found
