"""The project's shape that users and tools rely on."""

from __future__ import annotations

import sys
import tomllib

from tests.conftest import REPO


def test_no_job_module_shadows_the_standard_library():
    # `spark-submit pipelines/<job>.py` puts pipelines/ first on sys.path, so a module named
    # like a standard one (inspect, gc, types…) would replace it for the whole job.
    names = {p.stem for p in (REPO / "pipelines").glob("*.py")}
    assert not names & set(sys.stdlib_module_names)


def test_every_dependency_is_pinned():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    pins = {
        line.split("==")[0].lower().replace("_", "-")
        for line in (REPO / "constraints.txt").read_text().splitlines()
        if "==" in line
    }
    wanted = project["dependencies"] + project["optional-dependencies"]["dev"]
    names = {d.split("[")[0].split("<")[0].split("=")[0].strip().lower().replace("_", "-") for d in wanted}
    assert names <= pins, names - pins
