"""Checkpoints as the inspection pages name them: ``<run key>@<step>`` in forms and URLs, a run's
key and step on the page, and the absolute folder that ``evals.samples`` and ``evals.ratings`` hold."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ui.sources import BadRequest, NotFound, RunDir, Sources, checkpoint_dirs, is_number


@dataclass(frozen=True)
class Checkpoint:
    key: str  # "<run key>@<step>": what a form sends
    run_key: str
    step: int
    path: Path

    @property
    def label(self) -> str:
        return f"{self.run_key} step {self.step}"

    @property
    def href(self) -> str:
        return f"/runs/{self.run_key}/checkpoints/{self.step}"


def all_checkpoints(sources: Sources, runs: list[RunDir] | None = None) -> list[Checkpoint]:
    """Every complete checkpoint of the runs under the UI's folders, by run, oldest step first."""
    return [
        Checkpoint(f"{run.key}@{int(d.name[5:])}", run.key, int(d.name[5:]), d)
        for run in (sources.runs() if runs is None else runs)
        for d in checkpoint_dirs(run)
    ]


def find_checkpoints(sources: Sources, keys: list[str] | tuple[str, ...]) -> list[Checkpoint]:
    """The checkpoints a form or link names as ``<run key>@<step>``, in its order."""
    found = {c.key: c for c in all_checkpoints(sources)}
    chosen = []
    for key in keys:
        run_key, _, step = key.rpartition("@")
        if not run_key or not is_number(step):
            raise BadRequest(f"a checkpoint is named <run>@<step>, e.g. runs/tiny@4; got {key!r}")
        if f"{run_key}@{int(step)}" not in found:
            raise NotFound(f"no complete checkpoint {key!r} under the UI's folders; its run's page lists them")
        chosen.append(found[f"{run_key}@{int(step)}"])
    return chosen


class Labels:
    """Names for the absolute run and checkpoint folders the eval tables hold: the run's key (and
    the step) when the run is under the UI's folders, else the folder itself."""

    def __init__(self, sources: Sources) -> None:
        runs = sources.runs()
        self._runs = {str(run.path): run.key for run in runs}
        self._found = {str(c.path): c for c in all_checkpoints(sources, runs)}

    def checkpoint(self, path: str) -> Checkpoint | None:
        return self._found.get(path)

    def run(self, path: str) -> str | None:
        return self._runs.get(path)

    def __call__(self, path: str) -> str:
        found = self._found.get(path)
        return found.label if found else self._runs.get(path, path)
