"""One small factory built by the real jobs for the UI tests: ingest → dedup → filter → pin →
train (torchrun, 1 rank) → checkpoints, plus an eval-results and a sweep-trials table, and the
decisions (factory.decisions) that promoted its filtered snapshot and determined its mixture."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from tests.conftest import REPO
from tests.documents import prose

# Planted in a document: markup that would run if the UI ever emitted document text unescaped.
XSS = (
    "Notes <script>window.__xss = 1; console.log('XSS-RAN')</script> and "
    "<img src=x onerror=\"window.__xss = 2; console.log('XSS-RAN')\"> and "
    '<a id="planted-link" href="javascript:window.__xss = 3">click</a>. '
)
XSS_DOC = XSS + prose(900)

FILTER_CONFIG = """
filters = ["size", "gopher_quality", "gopher_repetition"]
sources = ["web"]
[size]
min_bytes = 1
max_bytes = 20000
[gopher_quality]
min_doc_words = 0
"""

TRAIN_CONFIG = """
[data]
manifest = "{manifest}"
tokenizer = "{tokenizer}"
seq_len = 32
global_batch_size = 4
backend = "local"
num_shards = 2

[model]
preset = "tiny"

[train]
steps = 4
micro_batch_size = 2

[optim]
lr = 0.01
warmup_steps = 1

[eval]
every = 2
batches = 1

[checkpoint]
every = 2
keep = 2
"""

EVAL_SCHEMA = pa.schema(
    [
        ("run_id", pa.string()),
        ("checkpoint", pa.string()),
        ("step", pa.int64()),
        ("manifest_fingerprint", pa.string()),
        ("snapshot_ids", pa.string()),
        ("suite", pa.string()),
        ("metric", pa.string()),
        ("value", pa.float64()),
        ("samples", pa.int64()),
        ("code_version", pa.string()),
        ("eval_run_id", pa.string()),
    ]
)


@dataclass(frozen=True)
class BuiltFactory:
    home: Path
    raw_file: Path
    run_dir: Path
    run_key: str
    xss_doc_id: str
    near_original: str
    near_copy: str


def documents() -> dict[str, str]:
    docs = {f"good-{i}": prose(i) for i in range(40)}
    original = prose(500, sentences=24)
    lines = original.splitlines()
    lines[2] += " The lantern stayed lit."
    docs["near-a"] = original
    docs["near-b"] = "\n".join(lines) + "\n"  # a near duplicate: one line of twelve grew
    docs["exact-copy"] = prose(3)  # the same text as good-3
    docs["spam"] = "\n".join(["Buy the best tools and seeds with us in the village today."] * 12)
    docs["hello"] = "Hi."
    docs["xss"] = XSS_DOC
    return docs


def build(spark, home: Path) -> BuiltFactory:
    from pyiceberg.catalog import load_catalog

    from lakehouse.catalog import embedded_catalog_properties
    from mixtures.pin import pin
    from mixtures.spec import spec_from_dict
    from pipelines.dedup import DedupOptions, dedup
    from pipelines.filter import FilterOptions, filter_documents
    from pipelines.ingest import IngestOptions, ingest
    from pipelines.ingest_records import RecordConfig
    from streaming_loader.tokenizer_train import train_tokenizer

    (home / "warehouse").mkdir(parents=True)
    catalog = load_catalog("factory", **embedded_catalog_properties(home))
    raw_file = home / "inputs" / "web.jsonl"
    raw_file.parent.mkdir()
    raw_file.write_text("".join(json.dumps({"id": k, "text": v}) + "\n" for k, v in documents().items()))
    ingest(
        spark,
        catalog,
        IngestOptions(
            [str(raw_file)],
            "jsonl",
            "raw.web",
            RecordConfig(source="web", id_field="id", path_field="id"),
            run_id="ui-ingest",
        ),
    )
    dedup(spark, catalog, DedupOptions(inputs=["raw.web"], output="dedup.web", run_id="ui-dedup"))
    config = home / "web.toml"
    config.write_text(FILTER_CONFIG)
    filter_documents(
        spark, catalog, FilterOptions("dedup.web", "filtered.web", str(config), run_id="ui-filter", tag="v1")
    )

    spec = {
        "name": "web-mix",
        "seed": 3,
        "components": [{"name": "web", "table": "filtered.web", "weight": 1.0, "heldout_fraction": 0.2}],
    }
    pin(catalog, spec_from_dict(spec)).save(home / "manifest.json")
    (home / "tokenizer.json").write_text(train_tokenizer(catalog, ["filtered.web"], 300).text)
    train_config = home / "train.toml"
    train_config.write_text(TRAIN_CONFIG.format(manifest=home / "manifest.json", tokenizer=home / "tokenizer.json"))
    run_dir = home / "runs" / "tiny"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "factory_cli.main",
            "train",
            "--config",
            str(train_config),
            "--nproc",
            "1",
            "--set",
            f"run.dir='{run_dir}'",
        ],
        cwd=REPO,
        env={**os.environ, "FACTORY_HOME": str(home), "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]

    fingerprint = json.loads((home / "manifest.json").read_text())["fingerprint"]
    rows = [
        {
            "run_id": "tiny",
            "checkpoint": str(run_dir / "checkpoints" / f"step-{step}"),
            "step": step,
            "manifest_fingerprint": fingerprint,
            "snapshot_ids": "[]",
            "suite": "heldout",
            "metric": "loss",
            "value": 5.0 - step / 4,
            "samples": 8,
            "code_version": "test",
            "eval_run_id": f"ev-{step}",
        }
        for step in (2, 4)
    ]
    catalog.create_namespace_if_not_exists("evals")
    catalog.create_table(("evals", "results"), EVAL_SCHEMA).append(pa.Table.from_pylist(rows, schema=EVAL_SCHEMA))
    trials = pa.table(
        {
            "sweep_id": ["lr-sweep"] * 2,
            "trial_id": ["t1", "t2"],
            "params": ['{"lr": 0.01}', '{"lr": 0.003}'],
            "status": ["done", "done"],
            "final_loss": [4.1, 4.4],
        }
    )
    catalog.create_namespace_if_not_exists("experiments")
    catalog.create_table(("experiments", "trials"), trials.schema).append(trials)

    record_decisions(catalog, home, run_dir, fingerprint)

    ids = catalog.load_table(("raw", "web")).scan(selected_fields=("path", "doc_id")).to_arrow().to_pylist()
    by_path = {r["path"]: r["doc_id"] for r in ids}
    return BuiltFactory(home, raw_file, run_dir, "runs/tiny", by_path["xss"], by_path["near-a"], by_path["near-b"])


def record_decisions(catalog, home: Path, run_dir: Path, fingerprint: str) -> None:
    """A gate that promoted filtered.web's snapshot on the evidence of sweep lr-sweep's trials, one
    that refused another for a reason holding markup, the mixture decision that made the manifest,
    and the ablation the run's factory.json says it took."""
    from lakehouse.decisions import record_decision
    from tests.decisions import ablation_decision, gate_decision, mixture_decision, write_run_record

    filtered = catalog.load_table(("filtered", "web")).current_snapshot().snapshot_id
    ablation = ablation_decision(run="tiny", decided_at="2026-01-03T10:00:00+00:00")
    for row in (
        gate_decision("web", table="filtered.web", production=None, candidate=filtered, sweep_id="lr-sweep"),
        gate_decision(
            "web",
            "refused",
            table="filtered.web",
            production=filtered,
            candidate=filtered + 1,
            reason=XSS,
            decided_at="2026-01-01T12:00:00+00:00",
        ),
        mixture_decision(
            "web-mix",
            before_fingerprint=None,
            after_fingerprint=fingerprint,
            manifest=str(home / "manifest.json"),
            components={"web": f"filtered.web@{filtered}"},
        ),
        ablation,
    ):
        assert record_decision(catalog, row) is not None
    write_run_record(run_dir, "tiny", [ablation["decision_id"]])


class Server:
    """The UI served by uvicorn on a free port, in a thread of the test process."""

    def __init__(self, home: Path, generation=None) -> None:
        import uvicorn

        from ui.app import create_app
        from ui.sources import Sources

        os.environ["FACTORY_HOME"] = str(home)
        app = create_app(Sources(None, [home]), generation)
        config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the UI server did not start")
            time.sleep(0.05)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    def __exit__(self, *_exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
