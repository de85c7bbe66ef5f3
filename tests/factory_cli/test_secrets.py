"""A catalog password never reaches the warehouse, a manifest, lineage.json or a log.

A real PostgreSQL role with a real (SCRAM-checked) password is given to the factory in each
form a SQLAlchemy URI can carry it; the whole chain then runs through the command line as a user
runs it: a Spark ingest that commits, a tokenizer, a pinned manifest, a training run that
checkpoints its lineage, `factory lineage`. Every file those wrote and every line they printed is
then searched for the password.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_factory
from tests.factory_cli.test_cli import write_corpus
from tests.pipelines.dedup_corpus import write_table

ROLE, PASSWORD = "factory_secret", "Pw-7Hq2xZ"


@pytest.fixture(scope="module")
def pg_role(postgres):
    postgres.add_password_role(ROLE, PASSWORD)
    return f"127.0.0.1:{postgres.port}/postgres"


# Each way a SQLAlchemy URI carries the password (libpq reads ?user= and ?password= as its own).
FORMS = {
    "userinfo": "postgresql+psycopg2://{role}:{pw}@{where}",
    "emptyuser": "postgresql+psycopg2://:{pw}@{where}?user={role}",
    "query": "postgresql+psycopg2://{role}@{where}?sslmode=disable&password={pw}",
}


def _catalog_env(name: str, uri: str, tmp_path: Path) -> dict[str, str]:
    return {
        f"PYICEBERG_CATALOG__{name.upper()}__TYPE": "sql",
        f"PYICEBERG_CATALOG__{name.upper()}__URI": uri,
        f"PYICEBERG_CATALOG__{name.upper()}__WAREHOUSE": (tmp_path / "warehouse").as_uri(),
        "FACTORY_CATALOG": name,
        "FACTORY_HOME": str(tmp_path / "home"),
    }


def _files_holding(root: Path, secret: str) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


@pytest.mark.slow
def test_catalog_password_reaches_no_file_and_no_log(pg_role, tmp_path):
    # The whole chain once, with the password where redaction has most to do (the query string);
    # the test below gives every form the catalog-facing commands.
    form = "query"
    name = f"secret{form}"  # pyiceberg reads '_' in an environment variable's name as '-'
    uri = FORMS[form].format(role=ROLE, pw=PASSWORD, where=pg_role)
    env = _catalog_env(name, uri, tmp_path)
    corpus = write_corpus(tmp_path / "corpus", n=60)
    steps = []

    def factory(*args: str) -> str:
        proc = run_factory(*args, env=env, timeout=600)
        steps.append(proc)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return proc.stdout

    factory("ingest", "--source", "web", "--format", "jsonl", str(corpus), "--output", "raw.web", "--run-id", "i1")
    factory("tokenizer", "train", "--input", "raw.web", "--vocab-size", "280", "--output", str(tmp_path / "tok.json"))
    spec = tmp_path / "spec.toml"
    spec.write_text('seed = 1\n[[components]]\nname = "web"\ntable = "raw.web"\nweight = 1.0\n')
    manifest = tmp_path / "manifest.json"
    factory("mix", "pin", str(spec), "--output", str(manifest))
    config = tmp_path / "train.toml"
    config.write_text(
        f'[data]\nmanifest = "{manifest}"\ntokenizer = "{tmp_path / "tok.json"}"\nseq_len = 16\n'
        f'global_batch_size = 2\n[run]\ndir = "{tmp_path / "run"}"\n[train]\nsteps = 1\n[optim]\nwarmup_steps = 0\n'
    )
    factory("train", "--config", str(config))
    lineage_text = factory("lineage", str(tmp_path / "run"), "--json")

    # The chain ran and recorded its catalog: the search below looked at real records.
    recorded = json.loads(manifest.read_text())["catalog"]
    assert recorded["name"] == name and "***" in recorded["uri"] and "127.0.0.1" in recorded["uri"]
    lineage = json.loads(lineage_text)
    assert lineage["manifest"]["catalog"] == recorded
    assert lineage["components"][0]["runs"][0]["run_id"] == "i1"  # lineage reached the catalog by its name
    assert not lineage.get("lineage_error")

    assert _files_holding(tmp_path, PASSWORD) == []
    for proc in steps:
        assert PASSWORD not in proc.stdout + proc.stderr


@pytest.mark.parametrize("form", sorted(FORMS))
def test_every_uri_form_is_redacted_in_the_manifest_the_snapshots_and_the_output(pg_role, tmp_path, form, monkeypatch):
    name = f"form{form}"  # not the chain's catalog: both share one PostgreSQL database
    env = _catalog_env(name, FORMS[form].format(role=ROLE, pw=PASSWORD, where=pg_role), tmp_path)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    from lakehouse.catalog import load_catalog

    docs = [{"doc_id": f"d{i}", "source": "web", "text": f"document {i}"} for i in range(3)]
    write_table(load_catalog(), "raw.web", docs, run_id="w1")  # the catalog logs in with the password
    spec = tmp_path / "spec.toml"
    spec.write_text('seed = 1\n[[components]]\nname = "web"\ntable = "raw.web"\nweight = 1.0\n')
    manifest = tmp_path / "manifest.json"
    steps = [
        run_factory("mix", "pin", str(spec), "--output", str(manifest), env=env),
        run_factory("snapshots", "raw.web", "--json", env=env),
        run_factory("tables", env=env),
    ]
    assert all(proc.returncode == 0 for proc in steps), [proc.stderr[-2000:] for proc in steps]
    recorded = json.loads(manifest.read_text())["catalog"]
    assert recorded["name"] == name and "***" in recorded["uri"] and "127.0.0.1" in recorded["uri"]
    assert json.loads(steps[1].stdout)[0]["factory"]["run-id"] == "w1"
    assert _files_holding(tmp_path, PASSWORD) == []
    for proc in steps:
        assert PASSWORD not in proc.stdout + proc.stderr


def test_catalog_errors_do_not_echo_the_password(tmp_path):
    # pyiceberg's own message repeats the URI when it cannot tell the catalog's type from it.
    env = {
        "PYICEBERG_CATALOG__BROKEN__URI": f"postgres://{ROLE}:{PASSWORD}@127.0.0.1:1/x?token={PASSWORD}",
        "FACTORY_HOME": str(tmp_path / "home"),
    }
    proc = run_factory("tables", "--catalog", "broken", env=env)
    assert proc.returncode == 2 and "cannot load catalog 'broken'" in proc.stderr
    assert PASSWORD not in proc.stdout + proc.stderr
    assert "postgres://factory_secret:***@127.0.0.1:1/x" in proc.stderr


def test_a_password_holding_an_at_sign_is_not_echoed_as_a_host(tmp_path):
    """SQLAlchemy cut the password at its '@' and psycopg2 named the rest as the host it could not find."""
    env = {
        "PYICEBERG_CATALOG__BROKEN__URI": f"postgresql+psycopg2://{ROLE}:hunter2@{PASSWORD}@127.0.0.1:1/x",
        "FACTORY_HOME": str(tmp_path / "home"),
    }
    proc = run_factory("tables", "--catalog", "broken", env=env)
    assert proc.returncode == 2 and "cannot load catalog 'broken'" in proc.stderr, proc.stderr
    assert PASSWORD not in proc.stdout + proc.stderr and "hunter2" not in proc.stderr
    assert "must be percent-encoded in the URI (%40" in proc.stderr


def test_a_catalog_user_without_rights_gets_one_line_not_sql(postgres, tmp_path):
    """A failure of the catalog's database after it loaded ended in exit 1 and SQLAlchemy's
    traceback, with the SQL it ran."""
    import psycopg2

    env = {
        "PYICEBERG_CATALOG__OWNED__URI": postgres.url,
        "PYICEBERG_CATALOG__OWNED__WAREHOUSE": (tmp_path / "warehouse").as_uri(),
        "FACTORY_HOME": str(tmp_path / "home"),
    }
    assert run_factory("tables", "--catalog", "owned", env=env).returncode == 0  # pyiceberg makes its tables
    with psycopg2.connect(postgres.url.replace("+psycopg2", "")) as connection, connection.cursor() as cursor:
        cursor.execute("DROP ROLE IF EXISTS factory_nobody; CREATE ROLE factory_nobody LOGIN")
    env["PYICEBERG_CATALOG__OWNED__URI"] = postgres.url.replace("//postgres@", "//factory_nobody@")
    proc = run_factory("tables", "--catalog", "owned", env=env)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.startswith("error: the catalog's database failed: permission denied for table iceberg_tables")
    assert "Traceback" not in proc.stderr and "SELECT" not in proc.stderr


def test_an_input_uri_with_a_credential_is_refused_without_echoing_it(tmp_path):
    """A scheme pyarrow cannot read gave a traceback that repeated the URI, password and all."""
    uri = f"https://{ROLE}:{PASSWORD}@127.0.0.1:9/data/part.jsonl"
    env = {"FACTORY_HOME": str(tmp_path / "home")}
    proc = run_factory("ingest", "--source", "web", "--format", "jsonl", uri, "--output", "raw.web", env=env)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert f"cannot read input https://{ROLE}:***@127.0.0.1:9/data/part.jsonl" in proc.stderr
    assert PASSWORD not in proc.stdout + proc.stderr
