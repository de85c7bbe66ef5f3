"""`factory snapshots` on what the jobs record in a snapshot's summary."""

from __future__ import annotations

import pyarrow as pa

from factory_cli.tables import format_snapshots
from lakehouse.catalog import ensure_table
from lakehouse.schemas import DOCUMENT_SCHEMA, arrow_schema


def test_a_snapshot_shows_what_made_it_and_leaves_out_what_it_does_not_record(catalog):
    table = ensure_table(catalog, ("filtered", "web"), DOCUMENT_SCHEMA)
    # What lakehouse.publish gives an empty table before its first audit branch: a job, a note, no run.
    table.add_files([], snapshot_properties={"factory.job": "init", "factory.note": "empty root for audit branches"})
    row = {"doc_id": "a", "source": "web", "text": "t", "path": "a", "lang": "en", "n_bytes": 1}
    props = {"factory.job": "filter", "factory.run-id": "f-1", "factory.code-version": "abc123"}
    table.append(pa.Table.from_pylist([row], schema=arrow_schema(DOCUMENT_SCHEMA)), snapshot_properties=props)

    shown = format_snapshots(catalog.load_table(("filtered", "web")))
    assert "    job init  (empty root for audit branches)\n" in shown
    assert "    job filter  run f-1  code abc123" in shown
    assert "None" not in shown


def test_a_ref_at_an_older_snapshot_is_listed_with_it(catalog):
    """`production` on the row of main's head read as "this snapshot is production" when the tag was older."""
    from factory_cli.tables import format_tables

    table = ensure_table(catalog, ("filtered", "docs"), DOCUMENT_SCHEMA)
    row = {"doc_id": "a", "source": "web", "text": "t", "path": "a", "lang": "en", "n_bytes": 1}
    table.append(pa.Table.from_pylist([row], schema=arrow_schema(DOCUMENT_SCHEMA)))
    older = catalog.load_table(("filtered", "docs")).current_snapshot().snapshot_id
    catalog.load_table(("filtered", "docs")).manage_snapshots().create_tag(older, "production").commit()
    line = next(x for x in format_tables(catalog).splitlines() if x.startswith("filtered.docs"))
    assert line.rstrip().endswith(" production"), line
    catalog.load_table(("filtered", "docs")).append(
        pa.Table.from_pylist([{**row, "doc_id": "b"}], schema=arrow_schema(DOCUMENT_SCHEMA))
    )
    line = next(x for x in format_tables(catalog).splitlines() if x.startswith("filtered.docs"))
    assert line.rstrip().endswith(f" production@{older}"), line


def _exit_of(capsys, *argv: str) -> tuple[int, str]:
    """The exit status of ``factory ARGV`` run in this process (argparse's refusals included) and its stderr."""
    from factory_cli.main import main

    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code
    return code, capsys.readouterr().err


def test_tags_refuse_the_jobs_branch_names_and_names_too_long_to_list(catalog, capsys):
    table = ensure_table(catalog, ("raw", "t"), DOCUMENT_SCHEMA)
    row = {"doc_id": "a", "source": "t", "text": "t", "path": "a", "lang": "en", "n_bytes": 1}
    table.append(pa.Table.from_pylist([row], schema=arrow_schema(DOCUMENT_SCHEMA)))
    for name, message in (
        ("audit-r1", "is reserved"),
        ("main", "is reserved"),
        ("v" * 5000, "at most 128"),
        ("-weird", "starting with a letter, digit or '_'"),
    ):
        code, err = _exit_of(capsys, "tag", "raw.t", "--", name)
        assert (code, message in err) == (2, True), err
    assert set(catalog.load_table(("raw", "t")).metadata.refs) == {"main"}
    assert _exit_of(capsys, "tag", "raw.t", "v1")[0] == 0


def test_show_and_snapshots_refuse_what_they_cannot_take(catalog, capsys):
    table = ensure_table(catalog, ("raw", "t"), DOCUMENT_SCHEMA)
    row = {"doc_id": "a", "source": "t", "text": "t", "path": "a", "lang": "en", "n_bytes": 1}
    table.append(pa.Table.from_pylist([row], schema=arrow_schema(DOCUMENT_SCHEMA)))
    code, err = _exit_of(capsys, "show", "raw.t", "-n", "99999999999999999999")
    assert code == 2 and "from 0 to 9223372036854775807" in err
    code, err = _exit_of(capsys, "snapshots", "raw.t@v1")
    assert code == 2 and "give a table, not a pinned snapshot" in err


def test_a_table_without_snapshots_is_named_whole(catalog, capsys):
    from factory_cli.main import main

    ensure_table(catalog, ("raw", "empty"), DOCUMENT_SCHEMA)
    assert main(["snapshots", "raw.empty"]) == 0
    assert capsys.readouterr().out == "raw.empty has no snapshots yet\n"


def _tagged_table(catalog) -> tuple[int, int]:
    """``raw.t`` with two snapshots, tag ``v1`` at the first, and a branch ``dev`` and ``audit-r1`` at the second."""
    table = ensure_table(catalog, ("raw", "t"), DOCUMENT_SCHEMA)
    row = {"doc_id": "a", "source": "t", "text": "t", "path": "a", "lang": "en", "n_bytes": 1}
    table.append(pa.Table.from_pylist([row], schema=arrow_schema(DOCUMENT_SCHEMA)))
    table.append(pa.Table.from_pylist([{**row, "doc_id": "b"}], schema=arrow_schema(DOCUMENT_SCHEMA)))
    first, second = (s.snapshot_id for s in sorted(table.snapshots(), key=lambda s: s.sequence_number))
    update = table.manage_snapshots().create_tag(first, "v1")
    update.create_branch(second, "dev").create_branch(second, "audit-r1").commit()
    return first, second


def _refs(catalog) -> dict[str, tuple[int, str]]:
    refs = catalog.load_table(("raw", "t")).metadata.refs
    return {name: (ref.snapshot_id, ref.snapshot_ref_type) for name, ref in refs.items()}


def test_delete_removes_the_tag_and_keeps_its_snapshot(catalog, capsys):
    from factory_cli.main import main

    first, _ = _tagged_table(catalog)
    assert "[v1]" in (main(["snapshots", "raw.t"]), capsys.readouterr().out)[1]

    assert main(["tag", "raw.t", "v1", "--delete"]) == 0
    assert capsys.readouterr().out == f"removed tag v1 of raw.t (was snapshot {first})\n"
    assert set(_refs(catalog)) == {"main", "dev", "audit-r1"}
    assert main(["snapshots", "raw.t"]) == 0
    shown = capsys.readouterr().out
    assert "v1" not in shown and str(first) in shown  # the snapshot stays until expired
    assert main(["show", f"raw.t@{first}", "--json"]) == 0
    assert '"doc_id": "a"' in capsys.readouterr().out
    # The name is free again: a new tag by it is no move, so no --force.
    assert main(["tag", "raw.t", "v1"]) == 0
    capsys.readouterr()
    # A tag by an audit branch's name (another tool's) stops the run it names: it can go too.
    table = catalog.load_table(("raw", "t"))
    table.manage_snapshots().create_tag(first, "audit-r2").commit()
    assert main(["tag", "raw.t", "audit-r2", "--delete"]) == 0
    assert "audit-r2" not in _refs(catalog)


def test_delete_refuses_what_is_no_tag_of_the_table_and_changes_nothing(catalog, capsys):
    _tagged_table(catalog)
    before = _refs(catalog)
    for argv, message in (
        (("raw.t@v1", "v1"), "--delete takes a table, not a pinned snapshot"),
        (("raw.t", "v1", "--force"), "not allowed with argument"),
        (("raw.t", "v2"), "raw.t has no tag 'v2' (its tags: v1)"),
        (("raw.t", "main"), "'main' is the branch the jobs publish to, not a tag"),
        (("raw.t", "audit-r1"), "'audit-r1' is a branch of raw.t, not a tag"),
        (("raw.t", "dev"), "'dev' is a branch of raw.t, not a tag"),
        (("raw.t", "--", "-weird"), "starting with a letter, digit or '_'"),
        (("raw.t", "v" * 5000), "at most 128"),
        (("raw.nope", "v1"), "raw.nope"),
    ):
        code, err = _exit_of(capsys, "tag", "--delete", *argv)
        assert (code, message in err) == (2, True), (argv, err)
        assert _refs(catalog) == before, argv
