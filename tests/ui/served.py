"""``factory ui`` started as a user starts it, in its own process, quiet, on a free port: the URL
it says it listens on, read from its stdout (the one line ``-q`` leaves there)."""

from __future__ import annotations

import contextlib
import re
import select
import subprocess
from collections.abc import Iterator

from tests.conftest import start_factory

STARTUP_S = 60  # importing the app and opening the catalog: seconds on a loaded machine


@contextlib.contextmanager
def served_ui(*flags: str) -> Iterator[str]:
    """``factory ui -q --port 0 FLAGS`` running; yields the URL it printed (``http://127.0.0.1:PORT``)."""
    server = start_factory("ui", "-q", "--port", "0", *flags)
    try:
        yield printed_url(server)
    finally:
        server.terminate()
        server.wait(30)


def printed_url(server: subprocess.Popen) -> str:
    """The URL in the first line ``server`` prints to stdout, the real port in it."""
    ready, _, _ = select.select([server.stdout], [], [], STARTUP_S)
    assert ready, f"factory ui printed nothing to stdout within {STARTUP_S} s"
    line = server.stdout.readline()
    assert line, f"factory ui exited before serving: {server.stderr.read()[-2000:]}"
    found = re.fullmatch(r"listening on (http://127\.0\.0\.1:(\d+))\n", line)
    assert found and int(found.group(2)) != 0, f"not the URL it listens on: {line!r}"
    return found.group(1)
