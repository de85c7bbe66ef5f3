"""Named crash points, so tests can kill a real job at a chosen moment.

Setting ``FACTORY_FAIL_AT=<point>`` makes the process die abruptly at that point, as a killed
executor or driver would: no ``finally`` blocks, no cleanup. Unset, this costs one dict lookup.
"""

from __future__ import annotations

import os
import signal

ENV = "FACTORY_FAIL_AT"


def maybe_fail(point: str) -> None:
    """Die with SIGKILL here if ``$FACTORY_FAIL_AT`` names ``point``."""
    if os.environ.get(ENV) == point:
        os.kill(os.getpid(), signal.SIGKILL)
