"""Write-audit-publish on an Iceberg table (docs/architecture.md, "Write-audit-publish").

A job commits its output to an audit branch that starts at main's head, validates the
branch's snapshot, then moves main to it only if main's head is still an ancestor of it:
main then gains exactly the audited snapshot and loses nothing another writer committed.

pyiceberg's ``set_current_snapshot`` checks no ancestry (as of 0.12); the check is made here on
the loaded metadata, and the ref update carries pyiceberg's ``AssertRefSnapshotId`` requirement
for main's head as loaded, which the catalog checks atomically at commit: if main moved
between the check and the commit, the commit fails and the check is made again on fresh
metadata. A branch that does not exist yet would make pyiceberg start a snapshot with no
parent (holding only the new files), so the branch is created at main's head first; a table
with no snapshot at all first gets an empty one on main, as Iceberg writes to branches only
of tables that have a snapshot.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.table import Table
from pyiceberg.table.snapshots import ancestors_of
from sqlalchemy.exc import OperationalError

from lakehouse.catalog import load_table
from lakehouse.commit import MAIN_BRANCH
from lakehouse.errors import CommitError, FactoryError, InvalidIdentifierError, PublishRefusedError, RefNotFoundError
from lakehouse.refs import AUDIT_PREFIX, PinnedRef, format_identifier, validate_ref_name, validate_tag_name

log = logging.getLogger(__name__)

# Errors after which nothing was changed and a fresh attempt on reloaded metadata is safe.
_RETRYABLE = (CommitFailedException, OperationalError)


@dataclass(frozen=True)
class Published:
    table: str
    snapshot_id: int
    previous_main: int | None  # main's head before; None when main had no snapshot
    already: bool  # main already was at the snapshot


def head(table: Table, branch: str = MAIN_BRANCH) -> int | None:
    ref = table.metadata.refs.get(branch)
    return ref.snapshot_id if ref is not None else None


def is_ancestor(table: Table, ancestor_id: int | None, snapshot_id: int) -> bool:
    """True when ``ancestor_id`` is ``snapshot_id`` or one of its ancestors (None: the empty table)."""
    if ancestor_id is None:
        return True
    start = table.snapshot_by_id(snapshot_id)
    return start is not None and any(s.snapshot_id == ancestor_id for s in ancestors_of(start, table.metadata))


# The properties of the snapshot that empties an audit branch for a job that replaces the table's content.
EMPTIED = {"factory.job": "clear", "factory.note": "audit branch emptied: the run's output replaces the content"}


def start_branch(catalog: Catalog, identifier: tuple[str, ...], branch: str, *, empty: bool = False) -> Table:
    """Create ``branch`` at main's head unless it exists; with ``empty``, drop its data files.

    ``empty`` is for a job whose output replaces the table's content: the branch keeps main's
    head as an ancestor (so publishing is a fast-forward) but holds only what the job adds.
    """
    validate_ref_name(branch)
    name = format_identifier(identifier)
    table = _retry(lambda: _create_branch(load_table(catalog, identifier), branch, name), name)
    if empty and table.metadata.refs.get(branch) is not None and _has_files(table, branch):
        # A snapshot on the private branch with no factory.run-id: a retried run still commits. Its
        # job and note say what it is in `factory snapshots`, where it stays in main's history.
        _retry(
            lambda: load_table(catalog, identifier).delete(AlwaysTrue(), snapshot_properties=EMPTIED, branch=branch),
            name,
        )
        table = load_table(catalog, identifier)
    return table


def check_branch_free(table: Table | None, branch: str, name: str) -> None:
    """Refuse (``PublishRefusedError``) when ``branch``, a job's audit branch, is the name of a tag
    of ``table`` (None: a table not made yet): the job could never commit there. Jobs ask before
    their work, so a clash costs no Spark pass and stages no file."""
    existing = table.metadata.refs.get(branch) if table is not None else None
    if existing is not None and existing.snapshot_ref_type != "branch":
        raise PublishRefusedError(
            f"{name} has a tag {branch!r}, the name this run's audit branch needs (audit-<run-id>); nothing was "
            f"committed. Run again with another --run-id (or none), or remove the tag: "
            f"factory tag {name} {branch} --delete"
        )


def _create_branch(table: Table, branch: str, name: str) -> Table:
    check_branch_free(table, branch, name)
    if branch in table.metadata.refs:
        return table
    if head(table) is None:
        # Iceberg writes to a branch only once the table has a snapshot: give main an empty one.
        table.add_files(
            [], snapshot_properties={"factory.job": "init", "factory.note": "empty root for audit branches"}
        )
    table.manage_snapshots().create_branch(head(table), branch).commit()
    return table


def _has_files(table: Table, branch: str) -> bool:
    snapshot = table.snapshot_by_name(branch)
    return snapshot is not None and int(snapshot.summary.get("total-data-files", "0") or 0) > 0


def publish(catalog: Catalog, identifier: tuple[str, ...], snapshot_id: int, *, max_attempts: int = 8) -> Published:
    """Move main to ``snapshot_id`` if main's head is still one of its ancestors.

    Raises ``PublishRefusedError`` (main untouched) when main has moved elsewhere.
    """
    name = format_identifier(identifier)
    return _retry(lambda: publish_snapshot(load_table(catalog, identifier), snapshot_id, name), name, max_attempts)


def publish_snapshot(table: Table, snapshot_id: int, name: str) -> Published:
    """One attempt on ``table``'s metadata as loaded (``name`` is for messages).

    Raises ``CommitFailedException`` when main moved after ``table`` was loaded (the ref
    update's requirement), ``PublishRefusedError`` when main is not an ancestor.
    """
    main = head(table)
    if main == snapshot_id:
        return Published(name, snapshot_id, main, already=True)
    if not is_ancestor(table, main, snapshot_id):
        raise PublishRefusedError(
            f"{name}: main moved to snapshot {main} while snapshot {snapshot_id} was audited, and {main} is not "
            f"an ancestor of it; main was left unchanged. Run the job again with a new run id to filter "
            f"against the new state of the table."
        )
    # set_current_snapshot requires (AssertRefSnapshotId) that main is still `main` at commit.
    table.manage_snapshots().set_current_snapshot(snapshot_id=snapshot_id).commit()
    log.info("%s: main moved from %s to audited snapshot %s", name, main, snapshot_id)
    return Published(name, snapshot_id, main, already=False)


def remove_branch(catalog: Catalog, identifier: tuple[str, ...], branch: str) -> None:
    """Drop a branch that served its purpose (best effort: a leftover branch costs nothing)."""
    try:
        table = load_table(catalog, identifier)
        if branch in table.metadata.refs:
            table.manage_snapshots().remove_branch(branch).commit()
    except _RETRYABLE as exc:
        log.warning("%s: could not remove branch %s (%s); remove it later", format_identifier(identifier), branch, exc)


def _retry(action, name: str, max_attempts: int = 8):
    last_error: Exception | None = None
    for attempt in range(1, max_attempts + 1):
        try:
            return action()
        except _RETRYABLE as exc:
            last_error = exc
            wait = min(0.1 * 2**attempt, 5.0) * (1 + random.random())
            log.warning("%s: lost a race (%s); retry %d/%d in %.1fs", name, exc, attempt, max_attempts, wait)
            time.sleep(wait)
    raise CommitError(f"{name}: gave up after {max_attempts} attempts, other writers kept changing it ({last_error})")


def tag_snapshot(table: Table, pinned: PinnedRef, name: str, *, force: bool = False) -> None:
    """Point tag ``name`` at the pinned snapshot (moving it only with ``force``)."""
    validate_tag_name(name)
    existing = table.metadata.refs.get(name)
    if existing is not None:
        if existing.snapshot_ref_type != "tag":
            raise InvalidIdentifierError(f"{name!r} is a branch of {pinned.table_name}, not a tag")
        if existing.snapshot_id == pinned.snapshot_id:
            return
        if not force:
            raise FactoryError(f"tag {name!r} already names snapshot {existing.snapshot_id}; use --force to move it")
        table.manage_snapshots().remove_tag(name).create_tag(pinned.snapshot_id, name).commit()
        return
    table.manage_snapshots().create_tag(pinned.snapshot_id, name).commit()


def delete_tag(catalog: Catalog, identifier: tuple[str, ...], name: str) -> int:
    """Remove tag ``name`` of the table, as Iceberg's ``ALTER TABLE … DROP TAG``; the snapshot id it named.

    Only the name goes: the snapshot stays until it is expired, and what was pinned through the
    tag (a manifest, a snapshot's ``factory.inputs``) holds the snapshot id. Refused, the table
    unchanged (``FactoryError``): ``main``, a name no tag may take (``validate_tag_name``), a
    branch, a name the table has no ref by. A *tag* named ``audit-*`` is removed: only another
    tool makes one, and it stops the run whose audit branch it names (``check_branch_free``). The removal
    asserts at commit that the tag still names the snapshot read (pyiceberg's
    ``AssertRefSnapshotId``), so the id returned is the one the tag named when it went."""
    label = format_identifier(identifier)
    _check_deletable_name(name, label)

    def attempt() -> int:
        table = load_table(catalog, identifier)
        existing = table.metadata.refs.get(name)
        if existing is None:
            tags = sorted(n for n, ref in table.metadata.refs.items() if ref.snapshot_ref_type == "tag")
            raise RefNotFoundError(
                f"{label} has no tag {name!r} (its tags: {', '.join(tags) or 'none'}); nothing removed. "
                f"`factory snapshots {label}` lists its snapshots and refs"
            )
        if existing.snapshot_ref_type != "tag":
            raise InvalidIdentifierError(
                f"{name!r} is a branch of {label}, not a tag; nothing removed. `factory tag --delete` removes "
                f"tags only, never a branch ({MAIN_BRANCH} and {AUDIT_PREFIX}<run-id> are the jobs')"
            )
        table.manage_snapshots().remove_tag(name).commit()
        log.info("%s: tag %s removed (was snapshot %s)", label, name, existing.snapshot_id)
        return existing.snapshot_id

    return _retry(attempt, label)


def _check_deletable_name(name: str, label: str) -> None:
    """Refuse ``main``, which is always the jobs' branch, and a name no ref may have. An
    ``audit-*`` name passes: another engine or an older version may have made such a *tag*, which
    stops the job whose run id it names (``check_branch_free``); ``delete_tag`` refuses it when it
    is a branch."""
    if name == MAIN_BRANCH:
        raise InvalidIdentifierError(
            f"{name!r} is the branch the jobs publish to, not a tag; nothing removed. "
            f"`factory snapshots {label}` lists the tags of {label}"
        )
    if name.startswith(AUDIT_PREFIX):
        validate_ref_name(name)
    else:
        validate_tag_name(name)


def move_tag(catalog: Catalog, identifier: tuple[str, ...], name: str, expected: int | None, snapshot_id: int) -> None:
    """Point tag ``name`` at ``snapshot_id`` if it still names ``expected`` (None: no tag yet).

    A compare-and-set: the catalog checks the tag's snapshot at commit (pyiceberg's
    ``AssertRefSnapshotId``), so two deciders cannot both move it. Already at ``snapshot_id``: done.
    Moved elsewhere meanwhile: ``PublishRefusedError``, the tag left where the other put it."""
    validate_tag_name(name)
    label = format_identifier(identifier)

    def attempt() -> None:
        table = load_table(catalog, identifier)
        existing = table.metadata.refs.get(name)
        current = None if existing is None else existing.snapshot_id
        if existing is not None and existing.snapshot_ref_type != "tag":
            raise InvalidIdentifierError(f"{name!r} is a branch of {label}, not a tag")
        if current == snapshot_id:
            return
        if current != expected:
            raise PublishRefusedError(
                f"{label}: tag {name!r} moved to snapshot {current} while it was to move from {expected} to "
                f"{snapshot_id}; left where it is"
            )
        update = table.manage_snapshots()
        if existing is not None:
            update = update.remove_tag(name)
        update.create_tag(snapshot_id, name).commit()
        log.info("%s: tag %s moved from %s to %s", label, name, expected, snapshot_id)

    _retry(attempt, label)
