"""Checking ``FACTORY_SPARK_MASTER`` before Spark starts.

Spark itself meets a master it cannot reach by retrying for about 80 seconds, then fails with a
page of Java traceback (``Cannot call methods on a stopped SparkContext``), and a URL it does not
know with ``JAVA_GATEWAY_EXITED``: neither says which setting to fix.
"""

from __future__ import annotations

import re
import socket

from lakehouse.errors import InputError

_LOCAL = re.compile(r"local(\[(\*|\d+)(,\d+)?\])?|local-cluster\[\d+,\d+,\d+\]")
_OTHER = ("yarn", "k8s://", "mesos://")  # reached through their own clients: left to Spark
_CONNECT_S = 5.0


def check_master(master: str) -> None:
    """Refuse a master that is no Spark master URL, or a ``spark://`` master none of whose
    addresses accepts a connection."""
    if _LOCAL.fullmatch(master) or master == "yarn" or master.startswith(_OTHER):
        return
    if not master.startswith("spark://"):
        raise InputError(
            f"FACTORY_SPARK_MASTER={master!r} is not a Spark master URL: use local[N], spark://HOST:PORT, yarn or "
            "k8s://…, or leave it unset to run Spark in this process"
        )
    addresses = [a for a in master.removeprefix("spark://").split(",") if a]
    reasons = [_unreachable(a) for a in addresses]
    if all(reasons):
        raise InputError(
            f"cannot reach the Spark master {master} ({'; '.join(r for r in reasons if r)}): start it, or set "
            "FACTORY_SPARK_MASTER to its address (its web UI shows it, spark://HOST:7077 by default), or leave it "
            "unset to run Spark in this process"
        )


def _unreachable(address: str) -> str | None:
    """Why ``HOST:PORT`` accepts no connection, or None when it does."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        return f"{address!r} is not HOST:PORT"
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=_CONNECT_S):
            return None
    except OSError as exc:
        return f"{address}: {exc.strerror or exc}"
