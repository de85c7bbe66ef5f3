"""The web app: FastAPI routes, Jinja2 templates (autoescaped).

Every page is rendered on the server; the pages carry no script at all, and the
Content-Security-Policy says so, so a document that holds markup can only ever be shown as text.
The pages here only read; the inspection pages (``ui/inspection.py``) add the two forms that post:
the playground's generation and blind ratings.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Collection
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse
from fastapi.routing import APIRoute
from jinja2 import Environment, FileSystemLoader
from pyiceberg.schema import Schema
from starlette.exceptions import HTTPException
from starlette.routing import Match

from lakehouse.catalog import load_table, resolve
from lakehouse.commit import snapshot_stats, summary_properties
from lakehouse.decisions import VERDICTS
from lakehouse.errors import FactoryError, InputError, RefNotFoundError, TableNotFoundError
from lakehouse.redact import redact
from lakehouse.refs import parse_identifier
from lakehouse.schemas import CLUSTERS_SCHEMA, QUARANTINE_SCHEMA
from rl.lineage import check_rl_lineage
from trainer.lineage import lineage_in
from ui import clusters as cluster_pages
from ui import decisions as decision_pages
from ui import documents, inspection, quarantine
from ui.evals import ladders, run_evals, trials
from ui.generation import GenerationSettings
from ui.graph import NODE_H, NODE_W, snapshot_graph, snapshot_href
from ui.rl_lineage import rl_lineage
from ui.runs import curves, read_metrics, result_curves
from ui.sources import BadRequest, NotFound, Sources, checkpoint_dirs, is_number
from ui.tables import table_rows

log = logging.getLogger("factory.ui")

TEMPLATES = Path(__file__).with_name("templates")
# No script, no plugin, no frame, no form posting anywhere but to the UI itself.
# frame-ancestors: no other site may frame the forms that post (clickjacking).
CSP = (
    "default-src 'none'; img-src 'self' data:; style-src 'unsafe-inline'; form-action 'self'; base-uri 'none'; "
    "frame-ancestors 'none'"
)


class _PageRoute(APIRoute):
    """FastAPI's route, which also answers HEAD wherever it answers GET.

    HTTP has HEAD answered as GET, without the body (uvicorn leaves the body out); load balancers'
    health checks and ``curl -I`` send it. Starlette's plain ``Route`` adds HEAD to GET, FastAPI's
    ``APIRoute`` answers only the methods it is given, so each page answered HEAD with a 405."""

    def __init__(self, path: str, endpoint: Callable, *, methods: Collection[str] | None = None, **kwargs) -> None:
        if methods is not None and "GET" in {method.upper() for method in methods}:
            methods = {*methods, "HEAD"}
        super().__init__(path, endpoint, methods=methods, **kwargs)


def create_app(sources: Sources, generation: GenerationSettings | None = None) -> FastAPI:
    env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=True)
    env.filters["q"] = lambda value: quote(str(value), safe="")
    env.filters["pretty"] = lambda value: json.dumps(value, indent=2, sort_keys=True, default=str)
    env.filters["num"] = _number
    # A data file's URI can carry a key or a signature (s3://KEY:SECRET@bucket, ?sig=): masked on a page.
    env.filters["redact"] = redact
    env.globals.update(NODE_W=NODE_W, NODE_H=NODE_H, snapshot_href=snapshot_href)
    app = FastAPI(title="Model Factory", docs_url=None, redoc_url=None, openapi_url=None)
    app.router.route_class = _PageRoute  # before any route: every page, the inspection pages' too

    def page(template: str, code: int = 200, **context) -> HTMLResponse:
        html = env.get_template(template).render(**context)
        return HTMLResponse(html, status_code=code, headers={"Content-Security-Policy": CSP})

    def pinned(name: str, ref: str):
        table, pin = resolve(sources.catalog, f"{name}@{ref}")
        return table, pin.snapshot_id

    @app.exception_handler(FactoryError)
    async def factory_error(_request: Request, exc: FactoryError) -> HTMLResponse:
        status = 404 if isinstance(exc, (TableNotFoundError, RefNotFoundError, NotFound)) else 400
        return page("error.html", status, status=status, message=str(exc))

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> HTMLResponse:
        message = "no such page" if exc.status_code == 404 else str(exc.detail)
        response = page("error.html", exc.status_code, status=exc.status_code, message=message)
        response.headers.update(exc.headers or {})
        if exc.status_code == 405:  # RFC 9110: a 405 names the methods the resource answers
            response.headers["Allow"] = _allowed_methods(app, request.scope)
        return response

    @app.exception_handler(RequestValidationError)
    async def bad_parameter(_request: Request, exc: RequestValidationError) -> HTMLResponse:
        wrong = "; ".join(f"{'.'.join(map(str, e['loc'][1:]))}: {e['msg']}" for e in exc.errors())
        return page("error.html", 400, status=400, message=f"bad parameter: {wrong}")

    @app.exception_handler(Exception)
    async def server_error(request: Request, exc: Exception) -> HTMLResponse:
        log.exception("error serving %s", request.url.path)
        return page(
            "error.html", 500, status=500, message=f"internal error ({type(exc).__name__}); the server log has it"
        )

    @app.get("/", response_class=HTMLResponse)
    def home():
        rows = table_rows(sources.catalog)
        decisions = decision_pages.list_decisions(sources)
        return page(
            "home.html",
            tables=rows,
            runs=sources.runs(),
            manifests=sources.manifests(),
            decisions=decisions[: decision_pages.HOME_DECISIONS],
            decisions_total=len(decisions),
        )

    @app.get("/tables/{name}", response_class=HTMLResponse)
    def table_page(name: str):
        table = load_table(sources.catalog, parse_identifier(name))
        snapshots = [_snapshot_record(table, s) for s in sorted(table.snapshots(), key=lambda s: -s.timestamp_ms)]
        return page("table.html", name=name, snapshots=snapshots)

    @app.get("/tables/{name}/snapshots/{ref}", response_class=HTMLResponse)
    def snapshot_page(name: str, ref: str):
        table, snapshot_id = pinned(name, ref)
        record = _snapshot_record(table, table.snapshot_by_id(snapshot_id))
        graph = snapshot_graph(sources, name, snapshot_id)
        has_clusters, is_quarantine = _is_kind(table, CLUSTERS_SCHEMA), _is_kind(table, QUARANTINE_SCHEMA)
        return page(
            "snapshot.html", name=name, snap=record, graph=graph, has_clusters=has_clusters, is_quarantine=is_quarantine
        )

    @app.get("/tables/{name}/snapshots/{ref}/documents", response_class=HTMLResponse)
    def documents_page(name: str, ref: str, page_no: int = 0, q: str = "", cursor: str = "", doc_id: str = ""):
        table, snapshot_id = pinned(name, ref)
        label = f"{name}@{snapshot_id}"
        if page_no < 0:
            raise BadRequest("page_no must be zero or more")
        if doc_id:
            row, opened, total = documents.find_document(table, snapshot_id, label, doc_id)
            if row is None:
                raise NotFound(f"no document {doc_id!r} in {label}")
            return page(
                "document.html",
                name=name,
                snapshot_id=snapshot_id,
                row=_text_values(row),
                files_read=opened,
                files_total=total,
            )
        if q:
            result = documents.search(table, snapshot_id, label, q, cursor or None)
        else:
            result = documents.read_page(table, snapshot_id, label, page_no)
        return page(
            "documents.html",
            name=name,
            snapshot_id=snapshot_id,
            result=result,
            q=q,
            page_no=page_no,
            page_size=documents.PAGE_SIZE,
        )

    @app.get("/tables/{name}/snapshots/{ref}/clusters", response_class=HTMLResponse)
    def clusters_page(name: str, ref: str):
        table, snapshot_id = pinned(name, ref)
        _require_kind(table, name, CLUSTERS_SCHEMA, "a dedup job's clusters")
        return page(
            "clusters.html",
            name=name,
            snapshot_id=snapshot_id,
            clusters=cluster_pages.list_clusters(table, snapshot_id),
        )

    @app.get("/tables/{name}/snapshots/{ref}/clusters/{cluster_id}", response_class=HTMLResponse)
    def cluster_page(name: str, ref: str, cluster_id: str):
        table, snapshot_id = pinned(name, ref)
        _require_kind(table, name, CLUSTERS_SCHEMA, "a dedup job's clusters")
        members = cluster_pages.cluster_members(sources.catalog, table, snapshot_id, cluster_id)
        return page("cluster.html", name=name, snapshot_id=snapshot_id, cluster_id=cluster_id, members=members)

    @app.get("/tables/{name}/snapshots/{ref}/quarantine", response_class=HTMLResponse)
    def quarantine_page(name: str, ref: str):
        table, snapshot_id = pinned(name, ref)
        _require_kind(table, name, QUARANTINE_SCHEMA, "a quarantine")
        counts = quarantine.counts(table, snapshot_id)
        samples = quarantine.samples(table, snapshot_id)
        return page("quarantine.html", name=name, snapshot_id=snapshot_id, counts=counts, samples=samples)

    @app.get("/tables/{name}/snapshots/{ref}/quarantine/{doc_id}", response_class=HTMLResponse)
    def quarantined_document(name: str, ref: str, doc_id: str):
        table, snapshot_id = pinned(name, ref)
        _require_kind(table, name, QUARANTINE_SCHEMA, "a quarantine")
        rows = quarantine.document(table, snapshot_id, doc_id)
        if not rows:
            raise NotFound(f"document {doc_id!r} is not in {name}@{snapshot_id}")
        return page("quarantined.html", name=name, snapshot_id=snapshot_id, doc_id=doc_id, rows=rows)

    @app.get("/manifests/{fingerprint}", response_class=HTMLResponse)
    def manifest_page(fingerprint: str):
        found = sources.manifest(fingerprint)
        return page("manifest.html", found=found, manifest=found.manifest)

    @app.get("/runs/{key:path}/checkpoints/{step}", response_class=HTMLResponse)
    def checkpoint_page(key: str, step: str):
        run = sources.run(key)
        if not is_number(step):
            raise BadRequest(f"checkpoint step must be a number, got {step!r}")
        step_dir = next((d for d in checkpoint_dirs(run) if d.name == f"step-{int(step)}"), None)
        if step_dir is None:
            raise NotFound(f"run {key!r} has no complete checkpoint at step {step}")
        # Checked as `factory lineage` checks it: a crafted or damaged file is refused naming what is
        # wrong (a 400 page), where the template or the decisions would fail on it with a 500.
        lineage = _checked_lineage(step_dir)
        shaped, not_found, decisions_error = decision_pages.shaping(sources, lineage, step_dir)
        return page(
            "checkpoint.html",
            run=run,
            step=int(step),
            lineage=lineage,
            rl=rl_lineage(sources, lineage),
            path=step_dir,
            decisions=shaped,
            decisions_not_found=not_found,
            decisions_error=decisions_error,
        )

    @app.get("/runs/{key:path}", response_class=HTMLResponse)
    def run_page(key: str):
        run = sources.run(key)
        records = read_metrics(run.path)
        steps = [{"step": int(d.name[5:]), "path": d, **_lineage_or_error(d)} for d in checkpoint_dirs(run)]
        last = next((r for r in reversed(records) if r["kind"] == "train"), None)
        evals = run_evals(sources, run.key, run.path.name, str(run.path))
        return page(
            "run.html",
            run=run,
            plots=curves(run.path) + result_curves(evals),
            checkpoints=steps,
            last=last,
            evals=evals,
            evals_table=sources.optional_table(("evals", "results")) is not None,
        )

    @app.get("/sweeps", response_class=HTMLResponse)
    def sweeps_page(sort: str = "", sweep: str = ""):
        found = trials(sources, sort, sweep)
        run_keys = {str(run.path): run.key for run in sources.runs()}
        found_ladders = ladders(found[1]) if found else {}
        return page("sweeps.html", found=found, sort=sort, sweep=sweep, run_keys=run_keys, ladders=found_ladders)

    @app.get("/decisions", response_class=HTMLResponse)
    def decisions_page(kind: str = "", subject: str = ""):
        rows = decision_pages.list_decisions(sources, kind, subject)
        return page("decisions.html", rows=rows, kind=kind, subject=subject, kinds=list(VERDICTS))

    @app.get("/decisions/{decision_id}", response_class=HTMLResponse)
    def decision_page(decision_id: str):
        found = decision_pages.decision(sources, decision_id)
        return page("decision.html", d=found, row=found["row"])

    inspection.register(app, sources, page, generation or GenerationSettings())
    return app


def _allowed_methods(app: FastAPI, scope: dict) -> str:
    """The methods some route of the request's path answers. Starlette's 405 names only the first
    route's: GET /playground's, though POST /playground is a route too."""
    methods: set[str] = set()
    for route in app.router.routes:
        if route.matches(scope)[0] is not Match.NONE:
            methods |= getattr(route, "methods", None) or set()
    return ", ".join(sorted(methods))


def _lineage_or_error(step_dir: Path) -> dict:
    """A checkpoint's checked lineage for its row on the run's page, or why it is refused: one
    damaged checkpoint leaves the rest of the run's page to show."""
    try:
        return {"lineage": _checked_lineage(step_dir), "error": None}
    except InputError as exc:
        return {"lineage": {}, "error": str(exc)}


def _checked_lineage(step_dir: Path) -> dict:
    """A checkpoint's lineage checked as ``factory lineage`` checks it, an RL checkpoint's ``rl``
    section too: what the pages read of it is there, as the kind of value they read."""
    lineage = lineage_in(step_dir / "lineage.json", to_print=True)
    check_rl_lineage(lineage, step_dir / "lineage.json")
    return lineage


def _is_kind(table, schema: Schema) -> bool:
    """The table has every column of ``schema``: a dedup output has ``cluster_id`` and decisions a
    ``reason``, but neither has the columns the clusters or quarantine pages read."""
    return {f.name for f in schema.fields} <= {f.name for f in table.schema().fields}


def _require_kind(table, name: str, schema: Schema, kind: str) -> None:
    if not _is_kind(table, schema):
        raise BadRequest(f"{name} is not {kind} (it lacks their columns): this page is for another kind of table")


def _snapshot_record(table, snapshot) -> dict:
    summary = summary_properties(snapshot)
    factory = {
        k.removeprefix("factory."): v
        for k, v in summary.items()
        if k.startswith("factory.") and ".stats." not in k and not k.startswith("factory.stats.")
    }
    inputs, params = _json_or(factory.pop("inputs", "[]"), []), _json_or(factory.pop("params", "{}"), {})
    refs = sorted(name for name, ref in table.metadata.refs.items() if ref.snapshot_id == snapshot.snapshot_id)
    return {
        "snapshot_id": snapshot.snapshot_id,
        "parent_id": snapshot.parent_snapshot_id,
        "committed_at": datetime.fromtimestamp(snapshot.timestamp_ms / 1000, UTC).isoformat(timespec="seconds"),
        "operation": snapshot.summary.operation.value if snapshot.summary else None,
        "refs": refs,
        "records": summary.get("total-records", "0"),
        "added": summary.get("added-records", "0"),
        "factory": factory,
        "inputs": inputs,
        "params": params,
        "stats": snapshot_stats(snapshot),
    }


def _number(value) -> str:
    # Metrics as recorded carry 17 digits; six tell them apart, and the record's JSON keeps the rest.
    if value is None:
        return ""
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def _json_or(text: str, default):
    try:
        return json.loads(text)
    except ValueError:  # a hand-made summary: shown without it rather than failing the page
        return default


def _text_values(row: dict) -> dict:
    return {k: v.decode("utf-8", errors="replace") if isinstance(v, bytes) else v for k, v in row.items()}
