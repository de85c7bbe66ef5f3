"""``factory ui`` as a user starts it: bound to this machine only unless told otherwise, and its
playground's limits checked before it serves."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time

import httpx
import pytest

from tests.conftest import REPO, run_factory
from tests.ui.served import served_ui


@pytest.mark.engine
def test_factory_ui_binds_this_machine_only_by_default(factory_home):
    (factory_home / "warehouse").mkdir(parents=True)
    server = subprocess.Popen(
        [sys.executable, "-m", "factory_cli.main", "ui", "--port", "0"],
        cwd=REPO,
        env=os.environ.copy(),
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline, address, said = time.monotonic() + 60, None, []
        while address is None and time.monotonic() < deadline:
            line = server.stderr.readline()
            assert line or server.poll() is None, "factory ui exited before serving"
            said.append(line)
            found = re.search(r"Uvicorn running on (http://[^ ]+)", line)
            address = found.group(1) if found else None
        assert address is not None and address.startswith("http://127.0.0.1:")
        # A FACTORY_HOME with no lakehouse yet (a typo?) is served, empty, but not in silence.
        assert f"warning: no lakehouse in {factory_home} yet (FACTORY_HOME)" in "".join(said)
        home = httpx.get(address + "/", timeout=30)
        assert home.status_code == 200 and "default-src 'none'" in home.headers["content-security-policy"]
    finally:
        server.terminate()
        server.wait(30)


def test_factory_ui_refuses_an_address_it_cannot_listen_on_and_bad_options(factory_home, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run_factory("ui", "--port", str(port))
    assert done.returncode == 2 and f"cannot listen on 127.0.0.1:{port}: Address already in use" in done.stderr
    assert "Traceback" not in done.stderr and "ERROR:" not in done.stderr
    done = run_factory("ui", "--host", "no-such-host.invalid", "--port", "0")
    assert done.returncode == 2 and "--host no-such-host.invalid:" in done.stderr, done.stderr
    done = run_factory("ui", "--runs", str(tmp_path / "none"))
    assert done.returncode == 2 and "is not a folder" in done.stderr
    done = run_factory("ui", "--device", "bogus")
    assert done.returncode == 2 and "--device 'bogus' is not a torch device" in done.stderr
    # A device torch cannot reach: the server started, and every generation was a 500.
    done = run_factory("ui", "--device", "cuda:99", "--port", "0")
    assert done.returncode == 2 and "--device cuda:99: this machine has " in done.stderr, done.stderr


def test_factory_ui_refuses_playground_limits_that_cannot_work(factory_home):
    for flags in (["--models", "0"], ["--generate-timeout", "0"]):
        done = run_factory("ui", *flags)
        assert done.returncode == 2 and "--generate-workers and --models must be 1 or more" in done.stderr, flags


@pytest.mark.engine
def test_factory_ui_quiet_on_a_free_port_prints_the_url_it_listens_on(factory_home):
    # uvicorn's "Uvicorn running on" line, the only one that named the port, is a log line -q silences.
    (factory_home / "warehouse").mkdir(parents=True)
    with served_ui() as url:
        home = httpx.get(url + "/", timeout=30)
        assert home.status_code == 200 and "Model Factory" in home.text
