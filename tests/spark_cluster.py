"""A throwaway Spark standalone cluster for the tests: a Master and Workers as separate JVMs,
started with pyspark's own ``bin/spark-class`` on 127.0.0.1."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from pyspark.find_spark_home import _find_spark_home

from pipelines.jvm_options import JIT_OPTIONS
from tests.ports import free_port

QUICK_JIT = JIT_OPTIONS["quick"]
# What spark-submit needs to give its driver and executors the same compiler setting.
QUICK_JIT_SUBMIT = ["--driver-java-options", QUICK_JIT, "--conf", f"spark.executor.extraJavaOptions={QUICK_JIT}"]


class StandaloneCluster:
    """``spark://127.0.0.1:PORT`` with ``workers`` Workers of ``cores`` cores and ``memory`` each.

    ``worker_env`` is added to the Workers' environment (their executors and Python workers
    inherit it); PYTHONPATH is removed from it otherwise, as on a cluster that has never seen
    the driver's checkout.
    """

    def __init__(
        self, workers: int = 2, cores: int = 1, memory: str = "768m", worker_env: dict[str, str] | None = None
    ) -> None:
        self.spark_home = Path(_find_spark_home())
        self.root = Path(tempfile.mkdtemp(prefix="factory-spark-cluster-"))
        self.port, self.ui_port = free_port(), free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.workers, self.cores, self.memory = workers, cores, memory
        self.worker_env = worker_env or {}
        self.procs: list[subprocess.Popen] = []

    def _env(self, extra: dict[str, str]) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        # Small daemons: the Master and Workers only schedule; the executors do the work.
        env |= {"SPARK_HOME": str(self.spark_home), "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_DAEMON_MEMORY": "256m"}
        # C1 only, as the factory's own sessions (pipelines/jvm_options.py): on 2 cores, C2 spends
        # the cores the tests' short jobs need.
        env["SPARK_DAEMON_JAVA_OPTS"] = QUICK_JIT
        return env | extra

    def _start(self, name: str, args: list[str], extra: dict[str, str]) -> None:
        log = (self.root / f"{name}.log").open("wb")
        command = [str(self.spark_home / "bin" / "spark-class"), *args]
        # Its own process group: teardown ends this JVM and whatever it started, nothing else.
        proc = subprocess.Popen(
            command, env=self._env(extra), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.procs.append(proc)

    def start(self, timeout: float = 120) -> None:
        master = ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(self.port)]
        self._start("master", [*master, "--webui-port", str(self.ui_port)], {})
        for i in range(self.workers):
            work = self.root / f"worker-{i}"
            work.mkdir()
            worker = ["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--webui-port", "0"]
            args = [*worker, "--cores", str(self.cores), "--memory", self.memory, "--work-dir", str(work), self.url]
            self._start(f"worker-{i}", args, self.worker_env)
        deadline = time.monotonic() + timeout
        while self.state().get("aliveworkers", 0) < self.workers:
            if time.monotonic() > deadline or any(p.poll() is not None for p in self.procs):
                logs = "\n".join(p.read_text(errors="replace")[-1500:] for p in sorted(self.root.glob("*.log")))
                self.stop()
                raise RuntimeError(f"the Spark standalone cluster did not come up:\n{logs}")
            time.sleep(0.5)

    def state(self) -> dict:
        """The Master's JSON status (workers, apps), or {} while it is not answering yet (a Master
        still starting can answer with an empty body)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as response:
                return json.load(response)
        except (OSError, ValueError):
            return {}

    def executor_dirs(self, worker: int) -> list[Path]:
        """The executor folders a Worker made (``<work-dir>/<app id>/<executor id>``)."""
        return sorted(p for p in (self.root / f"worker-{worker}").glob("app-*/*") if p.is_dir())

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        shutil.rmtree(self.root, ignore_errors=True)
