"""A run id bound to what it ran (docs/architecture.md, "The commit protocol", step 4).

A run id stands for one run: its job, parameters, inputs and further ``factory.*`` properties,
as its first commit recorded them. A retry with the same ones finishes what is missing, table by
table (``commit_run``); with others it is refused (``RunConflictError``), naming each difference.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.table.snapshots import Snapshot

from lakehouse.catalog import load_table
from lakehouse.commit import (
    MAIN_BRANCH,
    STATS_PREFIX,
    CommitResult,
    ReadCheck,
    Run,
    StagedFile,
    commit_files,
    committed_result,
    find_run_snapshot,
    recorded_inputs,
    recorded_params,
    summary_properties,
)
from lakehouse.errors import FactoryError, RunConflictError
from lakehouse.faults import maybe_fail
from lakehouse.json_paths import ABSENT, differing_paths, flatten
from lakehouse.refs import format_identifier

# Summary keys that are not among a run's further properties: its own fields, and the attempt and
# code that made the snapshot, which a retry changes (a run id's binding: ``_binding``).
_NOT_PROPERTIES = {"factory.run-id", "factory.attempt-id", "factory.code-version", "factory.job", "factory.params",
                   "factory.inputs"}  # fmt: skip


def run_snapshots(
    catalog: Catalog, identifiers: Iterable[tuple[str, ...]], run_id: str, *, branch: str = MAIN_BRANCH
) -> dict[tuple[str, ...], Snapshot | None]:
    """The snapshot run ``run_id`` committed to ``branch`` of each table; None where it has not
    (or the table does not exist). Nothing is checked: see ``find_run_commits``."""
    found: dict[tuple[str, ...], Snapshot | None] = {}
    for identifier in identifiers:
        try:
            table = catalog.load_table(identifier)
        except NoSuchTableError:
            found[identifier] = None
            continue
        found[identifier] = find_run_snapshot(table, run_id, branch)
    return found


def check_run_commits(
    run: Run, snapshots: Mapping[tuple[str, ...], Snapshot | None], *, branch: str = MAIN_BRANCH
) -> None:
    """Raise ``RunConflictError`` if one of ``snapshots`` (the run's earlier commits) was made
    with another job, other parameters, inputs or properties than ``run``."""
    for identifier, snapshot in snapshots.items():
        if snapshot is not None:
            _check_binding(run, snapshot, _place(identifier, branch))


def find_run_commits(
    catalog: Catalog, run: Run, identifiers: Iterable[tuple[str, ...]], *, branch: str = MAIN_BRANCH
) -> dict[tuple[str, ...], Snapshot | None]:
    """What ``run`` already committed to ``branch`` of each table (None where nothing yet), each
    checked to be bound to the run's job, parameters and inputs: ``RunConflictError`` otherwise."""
    found = run_snapshots(catalog, identifiers, run.run_id, branch=branch)
    check_run_commits(run, found, branch=branch)
    return found


@dataclass(frozen=True)
class RunOutput:
    """What a run commits to one table: the files its tasks staged, for ``branch``."""

    identifier: tuple[str, ...]
    files: Sequence[StagedFile]
    branch: str = MAIN_BRANCH
    read: ReadCheck | None = None  # what the run read of the table, checked again at commit


def commit_run(
    catalog: Catalog, run: Run, outputs: Sequence[RunOutput], stats: Mapping[str, object]
) -> list[CommitResult]:
    """Commit each output in order, one snapshot per table, all with the same summary.

    A table that already holds this run's snapshot is not committed again: a retry finishes
    only what an earlier attempt left missing. That snapshot must have been made with this
    run's parameters and inputs and have recorded the same ``stats`` (the same counts show the
    retry redid the same work); otherwise ``RunConflictError``, and nothing more is committed.
    """
    results = []
    with release_staging_on_refusal(catalog, run, [output.identifier for output in outputs]):
        for n, output in enumerate(outputs):
            if n:
                maybe_fail("between-commits")
            result = commit_files(
                catalog, output.identifier, output.files, run, stats, branch=output.branch, read=output.read
            )
            if result.already_committed:
                snapshot = load_table(catalog, output.identifier).snapshot_by_id(result.snapshot_id)
                place = _place(output.identifier, output.branch)
                _check_binding(run, snapshot, place)
                _check_stats(run, snapshot, stats, place)
                result = committed_result(output.identifier, snapshot)
            results.append(result)
    return results


@contextlib.contextmanager
def release_staging_on_refusal(catalog: Catalog, run: Run, identifiers: Iterable[tuple[str, ...]]) -> Iterator[None]:
    """Release this attempt's leases on its staging folders of ``identifiers`` when the block
    refuses the run (a ``FactoryError``: the attempt will commit nothing more), so ``factory gc``
    need not wait out the lease. Any other error leaves them to lapse, as a crash does: the outcome
    of a commit it interrupted may be unknown (docs/architecture.md, "The commit protocol")."""
    try:
        yield
    except FactoryError:
        for identifier in identifiers:
            with contextlib.suppress(FactoryError, NoSuchTableError, OSError):  # best effort: the refusal is the news
                run.release_staging(load_table(catalog, identifier))
        raise


def _binding(summary: Mapping[str, str], where: str) -> dict[str, object]:
    """The part of a run's snapshot summary that its run id is bound to, as plain JSON; a summary
    another tool wrote under this run id is refused naming ``where``."""
    return {
        "job": summary.get("factory.job"),
        "params": recorded_params(summary.get("factory.params"), f"{where}'s factory.params"),
        "inputs": recorded_inputs(summary.get("factory.inputs"), f"{where}'s factory.inputs"),
        "properties": {
            key: value
            for key, value in sorted(summary.items())
            if key.startswith("factory.") and key not in _NOT_PROPERTIES and not key.startswith(STATS_PREFIX)
        },
    }


def check_binding(
    run: Run, snapshot: Snapshot, identifier: tuple[str, ...], *, branch: str = MAIN_BRANCH, inputs: bool = True
) -> None:
    """Raise ``RunConflictError`` if ``snapshot``, found as run ``run.run_id``'s commit to ``branch``
    of the table, was made with another job, parameters or properties than ``run``, or, unless
    ``inputs`` is false, other inputs (a job whose input is the table's head at its commit, as
    ``factory compact``'s, cannot know it before)."""
    _check_binding(run, snapshot, _place(identifier, branch), inputs=inputs)


def _check_binding(run: Run, snapshot: Snapshot, place: str, *, inputs: bool = True) -> None:
    recorded = _binding(summary_properties(snapshot), f"{place} snapshot {snapshot.snapshot_id}")
    wanted = _binding(run.summary({}), f"run {run.run_id!r}")
    if not inputs:
        del recorded["inputs"], wanted["inputs"]
    differences = _differences(recorded, wanted)
    if differences:
        raise RunConflictError(
            f"run id {run.run_id!r} already committed {place} snapshot {snapshot.snapshot_id} with other "
            f"parameters or inputs than this command's: {_listed(differences)}. Nothing more was committed. "
            f"A run id stands for one run: to run with these parameters and inputs give a new --run-id (or "
            f"none); to finish or re-check that run, repeat its own command."
        )


def _check_stats(run: Run, snapshot: Snapshot, stats: Mapping[str, object], place: str) -> None:
    prefix = len(STATS_PREFIX)
    recorded = {k[prefix:]: _plain(v) for k, v in summary_properties(snapshot).items() if k.startswith(STATS_PREFIX)}
    differences = _differences({"stats": recorded}, {"stats": {k: _plain(str(v)) for k, v in stats.items()}})
    if differences:
        raise RunConflictError(
            f"run {run.run_id!r} already committed {place} snapshot {snapshot.snapshot_id}, but this attempt "
            f"counted otherwise: {_listed(differences)}; its inputs must have changed since. Nothing more was "
            f"committed. Run again with a new --run-id (or none)."
        )


def _plain(text: str) -> object:
    return int(text) if text.lstrip("-").isdigit() else text


def _place(identifier: tuple[str, ...], branch: str) -> str:
    name = format_identifier(identifier)
    return name if branch == MAIN_BRANCH else f"{name} branch {branch}"


def _differences(recorded: object, wanted: object) -> list[str]:
    """``path: committed with X, now Y`` for each leaf where two JSON values differ."""
    flat_recorded, flat_wanted = flatten(recorded), flatten(wanted)
    return [
        f"{path}: committed with {_shown(flat_recorded.get(path, ABSENT))}, now {_shown(flat_wanted.get(path, ABSENT))}"
        for path in differing_paths(recorded, wanted)
    ]


def _shown(value: object, limit: int = 120) -> str:
    text = "(none)" if value is ABSENT else repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _listed(differences: list[str], limit: int = 8) -> str:
    more = len(differences) - limit
    return "; ".join(differences[:limit]) + (f"; and {more} more" if more > 0 else "")
