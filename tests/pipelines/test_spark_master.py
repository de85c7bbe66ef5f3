"""A Spark master that cannot work is refused before Spark starts, naming the setting to fix."""

from __future__ import annotations

import socket

import pytest

from lakehouse.errors import InputError
from pipelines.spark_master import check_master
from tests.conftest import run_factory
from tests.corpora import make_table
from tests.ports import free_port


@pytest.mark.parametrize("master", ["local", "local[*]", "local[4]", "local[2,3]", "local-cluster[2,1,1024]", "yarn"])
def test_masters_spark_reaches_by_itself_are_left_to_it(master):
    check_master(master)


def test_a_listening_standalone_master_is_accepted_and_one_listening_address_is_enough():
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        check_master(f"spark://127.0.0.1:{port}")
        check_master(f"spark://127.0.0.1:{free_port()},127.0.0.1:{port}")


@pytest.mark.parametrize(
    "master, says",
    [
        ("bogus://x", "is not a Spark master URL"),
        ("spark://nohostport", "'nohostport' is not HOST:PORT"),
        ("spark://127.0.0.1:{port}", "Connection refused"),
    ],
)
def test_a_master_that_cannot_work_is_refused(master, says):
    with pytest.raises(InputError, match=says):
        check_master(master.format(port=free_port()))


def test_factory_dedup_on_a_master_that_is_down_fails_at_once(catalog):
    """Spark retried for 80 s, then ended in a Java traceback and exit 1."""
    make_table(catalog, "raw.web", 3, files=1)
    master = f"spark://127.0.0.1:{free_port()}"
    proc = run_factory(
        "dedup", "--input", "raw.web", "--output", "dedup.web", env={"FACTORY_SPARK_MASTER": master}, timeout=60
    )
    assert proc.returncode == 2 and proc.stderr.startswith(f"error: cannot reach the Spark master {master}")
    assert "Traceback" not in proc.stderr
