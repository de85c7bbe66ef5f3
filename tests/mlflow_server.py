"""A throwaway MLflow tracking server for the tests: ``mlflow server`` on 127.0.0.1, a free port, a
SQLite backend store and an artifact folder under a temporary folder."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from tests.ports import free_port


class MlflowServer:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 180) -> None:
        """Start it and wait for ``/health`` (its start, uvicorn and the store's tables, takes 5-20 s)."""
        self.root.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(self.port)]
        command += ["--backend-store-uri", f"sqlite:///{self.root / 'mlflow.db'}", "--workers", "1"]
        command += ["--default-artifact-root", (self.root / "artifacts").as_uri()]
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}  # no job runner process
        with (self.root / "server.log").open("ab") as log:
            # Its own session: `mlflow server` runs uvicorn as a child, stopped with it.
            self.process = subprocess.Popen(
                command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise OSError(f"mlflow server exited {self.process.returncode}: {self.log()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                time.sleep(0.5)
        self.stop()
        raise OSError(f"mlflow server did not answer on {self.uri} within {timeout}s: {self.log()[-2000:]}")

    def log(self) -> str:
        return (self.root / "server.log").read_text(errors="replace")

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
