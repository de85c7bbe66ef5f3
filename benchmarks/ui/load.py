"""Load the UI as a team would: 20 clients at once over every page type of a factory home,
served by `factory ui` in a process of its own, as a user starts it.

Each page type (home, a table, a pinned snapshot and its lineage graph, a snapshot at ``main``,
a page of documents, a document, a search, clusters, a cluster, quarantine, a quarantined
document, a manifest, a run, a checkpoint, eval results, sweeps, decisions, a decision; and the
inspection pages: eval samples filtered by run, checkpoint, suite, task and pass/fail, a single
sample, two checkpoints compared, a blind rating's pair, the leaderboard, the playground's form;
an RL run's rollouts filtered and a single rollout, where the home has ``rl.rollouts``)
has the URLs the home holds for it (every table, snapshot, checkpoint, several pages, documents
and samples); the requests take the types in turn, and each type its URLs in turn.
``--clients`` threads, each with its own keep-alive connection, take the next request as soon as
their last one answered. Reported per page type: p50, p95 and max latency; the wall time; the
server's RSS at start, after 200 requests and after all of them.

The playground is asked for its form only (``GET``), never to generate: a generation is bounded by
the UI's worker pool (``ui/generation.py``: it queues or refuses past it), not rendered per request,
and would time the model, not the server. A blind rating's page is a ``GET`` too (it draws a pair);
no vote is posted, so the home is left as it was.

With ``--baseline DIR`` a second server runs the code checked out in DIR (e.g. the commit before
the change: ``git worktree add /tmp/ui-base main``) over the same home, and the two take the same
requests in chunks of 200, alternately (ABBA), so that the machine's drift falls on both. A page
type the baseline does not serve (every request of it answered 404: the code predates it) is
reported for ours only, its column "— (404)", and does not count as the baseline's errors.

    PYTHONPATH=. python benchmarks/ui/load.py --home DIR [--baseline DIR] [--requests 2000] [--clients 20]

DIR is a factory home as `factory demo` leaves it (``cp -a`` one: the UI only reads, but keep
the original apart). The inspection pages need eval samples at two or more checkpoints and some
ratings; without them only their empty forms are asked for. Prepared from the demo's home
(about 4 minutes of CPU):

    cp -a /tmp/demo-final /tmp/ui-load-home
    export FACTORY_HOME=/tmp/ui-load-home
    for c in $FACTORY_HOME/factories/demo/runs/demo/*/checkpoints/step-*; do
        factory eval $c --suite humaneval humaneval_bpb --samples 2 --temperature 0.8 --max-new-tokens 64 -q
    done
    PYTHONPATH=. python benchmarks/ui/rate.py --home $FACTORY_HOME --ratings 60
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

CHUNK = 200  # requests per turn; RSS is also read after the first chunk
PAGES_PER_TABLE = (0, 1, 5, 20, 40, 60)
DOCUMENTS_PER_TABLE = 3
SEARCHES = ("import", "license", "the ", "zzz-nothing")
SAMPLES = 8  # single samples asked for, spread over evals.samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, required=True, help="a factory home as `factory demo` leaves it")
    parser.add_argument("--baseline", type=Path, help="a checkout of the code to compare with, served alongside")
    parser.add_argument("--requests", type=int, default=2000, help="requests to each server (default: 2000)")
    parser.add_argument("--clients", type=int, default=20, help="clients at once (default: 20)")
    parser.add_argument("--out", type=Path, help="write the figures here as JSON")
    args = parser.parse_args()
    if not (args.home / "catalog.db").is_file():
        print(
            f"error: {args.home} holds no catalog.db: run `factory demo` with FACTORY_HOME there first", file=sys.stderr
        )
        return 2
    if args.requests < CHUNK or args.requests % CHUNK:
        print(f"error: --requests must be a multiple of {CHUNK}", file=sys.stderr)
        return 2
    pages = discover(args.home)
    schedule = requests_in_turn(pages, args.requests)
    print(f"{len(pages)} page types, {sum(len(u) for u in pages.values())} URLs; {args.requests} requests each server")
    checkouts = {"ours": REPO} | ({"baseline": args.baseline.resolve()} if args.baseline else {})
    servers = {name: Server(checkout, args.home) for name, checkout in checkouts.items()}
    try:
        for server in servers.values():
            server.start()
        results = {name: Load(server.rss_mb()) for name, server in servers.items()}
        names = list(servers)
        for chunk in range(args.requests // CHUNK):
            order = names if chunk % 2 == 0 else names[::-1]  # ABBA: drift falls on both
            for name in order:
                load = results[name]
                load.run(servers[name].url, schedule[chunk * CHUNK : (chunk + 1) * CHUNK], args.clients)
                if chunk == 0:
                    load.rss_after_first = servers[name].rss_mb()
                print(f"  {name}: {(chunk + 1) * CHUNK} requests, {load.wall_s:.1f} s", flush=True)
        for name, server in servers.items():
            results[name].rss_end = server.rss_mb()
    finally:
        for server in servers.values():
            server.stop()
    summaries = {name: load.summary(list(pages)) for name, load in results.items()}
    report(summaries, list(pages))
    if args.out:
        args.out.write_text(json.dumps(summaries, indent=2))
    return 0 if not any(s["errors"] for s in summaries.values()) else 1


def discover(home: Path) -> dict[str, list[str]]:
    """Every page type's URLs on this home, read from its catalog and folders (not from the server,
    which would warm what it caches)."""
    os.environ["FACTORY_HOME"] = str(home)
    os.environ.pop("FACTORY_CATALOG", None)
    from lakehouse.catalog import list_tables, load_catalog
    from lakehouse.refs import format_identifier
    from ui.sources import Sources, checkpoint_dirs

    catalog = load_catalog()
    sources = Sources(None, [home])
    pages: dict[str, list[str]] = {k: [] for k in PAGE_TYPES}
    pages["home"].append("/")
    for identifier in list_tables(catalog):
        table = catalog.load_table(identifier)
        name = format_identifier(identifier)
        columns = {f.name for f in table.schema().fields}
        current = table.current_snapshot()
        pages["table"].append(f"/tables/{name}")
        pages["snapshot + lineage graph"] += [f"/tables/{name}/snapshots/{s.snapshot_id}" for s in table.snapshots()]
        pages["snapshot at main"].append(f"/tables/{name}/snapshots/main")
        if current is None:
            continue
        pinned = f"/tables/{name}/snapshots/{current.snapshot_id}"
        records = int(current.summary["total-records"])
        if name == "evals.results":
            pages["eval results"] += [f"{pinned}/documents", f"/tables/{name}/snapshots/main/documents"]
        elif "text" in columns and records:
            pages["documents"] += [f"{pinned}/documents?page_no={p}" for p in PAGES_PER_TABLE if p * 25 < records]
            ids = table.scan(snapshot_id=current.snapshot_id, selected_fields=("doc_id",)).to_arrow()["doc_id"]
            step = max(1, len(ids) // DOCUMENTS_PER_TABLE)
            pages["document"] += [
                f"{pinned}/documents?doc_id={quote(ids[i].as_py())}" for i in range(0, len(ids), step)
            ]
            pages["search"] += [f"{pinned}/documents?q={quote(q)}" for q in SEARCHES]
        if "cluster_size" in columns:
            pages["clusters"].append(f"{pinned}/clusters")
            sizes = table.scan(snapshot_id=current.snapshot_id, selected_fields=("cluster_id", "cluster_size"))
            multi = sorted({r["cluster_id"] for r in sizes.to_arrow().to_pylist() if r["cluster_size"] > 1})
            pages["cluster"] += [f"{pinned}/clusters/{quote(c)}" for c in multi[:DOCUMENTS_PER_TABLE]]
        if {"doc_id", "stage", "reason"} <= columns and records:
            pages["quarantine"].append(f"{pinned}/quarantine")
            ids = table.scan(snapshot_id=current.snapshot_id, selected_fields=("doc_id",)).to_arrow()["doc_id"]
            pages["quarantined document"] += [f"{pinned}/quarantine/{quote(i.as_py())}" for i in ids[:2]]
        if name == "factory.decisions":
            ids = table.scan(selected_fields=("decision_id",)).to_arrow()["decision_id"].to_pylist()
            pages["decision"] += [f"/decisions/{quote(i)}" for i in ids]
    pages["manifest"] += [f"/manifests/{quote(m.fingerprint)}" for m in sources.manifests()]
    for run in sources.runs():
        pages["run"].append(f"/runs/{quote(run.key)}")
        pages["checkpoint"] += [f"/runs/{quote(run.key)}/checkpoints/{d.name[5:]}" for d in checkpoint_dirs(run)]
    pages["sweeps"] += ["/sweeps", "/sweeps?sort=final_loss"]
    pages["decisions"] += ["/decisions", "/decisions?kind=refinement-gate"]
    _inspection_pages(catalog, sources, pages)
    _rollout_pages(catalog, pages)
    return {kind: urls for kind, urls in pages.items() if urls}


def _inspection_pages(catalog, sources, pages: dict[str, list[str]]) -> None:
    """The eval samples' pages (filtered lists, a sample, two checkpoints compared), blind ratings,
    the leaderboard and the playground's form, from ``evals.samples`` and the run folders."""
    from ui.checkpoints import all_checkpoints

    checkpoints = [c.key for c in all_checkpoints(sources)]
    pages["playground"].append("/playground")
    if checkpoints:
        ckpts = "&".join(f"ckpt={_q(c)}" for c in checkpoints[:2])
        pages["playground"].append(f"/playground?prompt={quote('def add(a, b):')}&{ckpts}")
    if not catalog.table_exists(("evals", "samples")):
        return
    table = catalog.load_table(("evals", "samples"))
    if table.current_snapshot() is None:
        return
    columns = ("sample_id", "run_id", "checkpoint", "step", "suite", "task_id", "passed")
    rows = sorted(table.scan(selected_fields=columns).to_arrow().to_pylist(), key=lambda r: r["sample_id"])
    suites = sorted({r["suite"] for r in rows})
    at = {s: sorted({(r["step"], r["checkpoint"]) for r in rows if r["suite"] == s}) for s in suites}
    listed = ["/samples", "/samples?page_no=1", f"/samples?run={_q(rows[0]['run_id'])}"]
    listed += [f"/samples?checkpoint={_q(c)}" for _, c in at[suites[0]]]
    for suite in suites:
        tasks = sorted({r["task_id"] for r in rows if r["suite"] == suite})
        listed += [f"/samples?suite={_q(suite)}", f"/samples?suite={_q(suite)}&task={_q(tasks[len(tasks) // 2])}"]
        listed += [f"/samples?suite={_q(suite)}&verdict={v}" for v in ("pass", "fail")]
        pages["blind rating"].append(f"/ratings?suite={_q(suite)}")
        pages["leaderboard"].append(f"/ratings/leaderboard?suite={_q(suite)}")
        pages["compare"].append(f"/samples/compare?suite={_q(suite)}")
        if len(at[suite]) >= 2:
            (_, a), (_, b) = at[suite][0], at[suite][-1]
            both = f"/samples/compare?suite={_q(suite)}&a={_q(a)}&b={_q(b)}"
            pages["compare"] += [both, f"{both}&page_no=1", f"/samples/compare?suite={_q(suite)}&a={_q(b)}&b={_q(a)}"]
    pages["samples"] += listed
    step = max(1, len(rows) // SAMPLES)
    pages["sample"] += [f"/samples/{_q(rows[i]['sample_id'])}" for i in range(0, len(rows), step)]
    pages["blind rating"].append("/ratings")
    pages["leaderboard"].append("/ratings/leaderboard")


def _rollout_pages(catalog, pages: dict[str, list[str]]) -> None:
    """An RL run's rollouts filtered by run, kind, step and outcome, and single rollouts, from
    ``rl.rollouts``; none where the home has no RL run."""
    if not catalog.table_exists(("rl", "rollouts")):
        return
    table = catalog.load_table(("rl", "rollouts"))
    if table.current_snapshot() is None:
        return
    columns = ("rollout_id", "run_id", "kind", "step", "outcome")
    rows = sorted(table.scan(selected_fields=columns).to_arrow().to_pylist(), key=lambda r: r["rollout_id"])
    run, steps = _q(rows[0]["run_id"]), sorted({r["step"] for r in rows})
    listed = ["/rollouts", "/rollouts?page_no=1", f"/rollouts?run={run}", f"/rollouts?run={run}&kind=heldout"]
    listed += [f"/rollouts?run={run}&step={s}" for s in (steps[0], steps[len(steps) // 2], steps[-1])]
    listed += [f"/rollouts?outcome={_q(o)}" for o in sorted({r["outcome"] for r in rows})[:3]]
    pages["rollouts"] += listed
    step = max(1, len(rows) // SAMPLES)
    pages["rollout"] += [f"/rollouts/{_q(rows[i]['rollout_id'])}" for i in range(0, len(rows), step)]


def _q(value: object) -> str:
    """A query value or path segment, every reserved character escaped (checkpoints are paths)."""
    return quote(str(value), safe="")


PAGE_TYPES = (
    "home",
    "table",
    "snapshot + lineage graph",
    "snapshot at main",
    "documents",
    "document",
    "search",
    "clusters",
    "cluster",
    "quarantine",
    "quarantined document",
    "manifest",
    "run",
    "checkpoint",
    "eval results",
    "sweeps",
    "decisions",
    "decision",
    "samples",
    "sample",
    "compare",
    "blind rating",
    "leaderboard",
    "playground",
    "rollouts",
    "rollout",
)


def requests_in_turn(pages: dict[str, list[str]], count: int) -> list[tuple[str, str]]:
    """(page type, URL): the types in turn, each its URLs in turn."""
    cycles = {kind: itertools.cycle(urls) for kind, urls in pages.items()}
    kinds = itertools.cycle(pages)
    return [(kind, next(cycles[kind])) for kind in itertools.islice(kinds, count)]


@dataclass
class Load:
    rss_start: float
    rss_after_first: float = 0.0
    rss_end: float = 0.0
    wall_s: float = 0.0
    times: dict[str, list[float]] = field(default_factory=dict)
    answers: dict[str, list[int]] = field(default_factory=dict)  # HTTP status per request, by page type
    errors: list[tuple[str, str]] = field(default_factory=list)  # (page type, "status URL")

    def absent(self) -> list[str]:
        """Page types this checkout does not serve: every request of the type answered 404 (a
        baseline from before the type existed). They are left out of its figures and errors."""
        return sorted(kind for kind, codes in self.answers.items() if set(codes) == {404})

    def run(self, base_url: str, requests: list[tuple[str, str]], clients: int) -> None:
        import httpx

        pending = iter(requests)
        lock = threading.Lock()

        def client() -> None:
            with httpx.Client(base_url=base_url, timeout=600) as http:
                while True:
                    with lock:
                        item = next(pending, None)
                    if item is None:
                        return
                    kind, url = item
                    began = time.perf_counter()
                    response = http.get(url)
                    took = time.perf_counter() - began
                    with lock:
                        self.times.setdefault(kind, []).append(took)
                        self.answers.setdefault(kind, []).append(response.status_code)
                        if response.status_code != 200:
                            self.errors.append((kind, f"{response.status_code} {url}"))

        threads = [threading.Thread(target=client) for _ in range(clients)]
        began = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self.wall_s += time.perf_counter() - began

    def summary(self, kinds: list[str]) -> dict:
        absent = self.absent()
        return {
            "wall_s": round(self.wall_s, 2),
            "rss_mb": {"start": self.rss_start, "after_200": self.rss_after_first, "end": self.rss_end},
            "errors": [error for kind, error in self.errors if kind not in absent],
            "absent": absent,
            "pages": {k: _stats(self.times[k]) for k in kinds if k in self.times and k not in absent},
        }


def _stats(times: list[float]) -> dict:
    ordered = sorted(times)

    def rank(q: float) -> float:  # nearest rank
        return ordered[max(0, math.ceil(q * len(ordered)) - 1)]

    return {"n": len(ordered), "p50_ms": rank(0.5) * 1000, "p95_ms": rank(0.95) * 1000, "max_ms": ordered[-1] * 1000}


def report(summaries: dict[str, dict], kinds: list[str]) -> None:
    names = list(summaries)
    head = " | ".join(f"{n} p50 / p95 / max ms" for n in names)
    print(f"\n| page type | n | {head} |")
    print("| --- | ---: |" + " ---: |" * len(names))
    for kind in kinds:
        cells = []
        for n in names:
            s = summaries[n]["pages"].get(kind)
            cells.append(f"{s['p50_ms']:,.0f} / {s['p95_ms']:,.0f} / {s['max_ms']:,.0f}" if s else "— (404)")
        count = summaries[names[0]]["pages"].get(kind, {}).get("n", 0)
        print(f"| {kind} | {count} | " + " | ".join(cells) + " |")
    for n in names:
        s = summaries[n]
        rss = s["rss_mb"]
        print(
            f"{n}: wall {s['wall_s']:.1f} s; RSS {rss['start']:.0f} MB at start, {rss['after_200']:.0f} after "
            f"{CHUNK}, {rss['end']:.0f} after all; {len(s['errors'])} non-200 answers {s['errors'][:5]}"
            + (f"; not served (every request 404): {', '.join(s['absent'])}" if s["absent"] else "")
        )


class Server:
    """`factory ui` from a checkout, in its own process, on a free port of 127.0.0.1."""

    def __init__(self, checkout: Path, home: Path) -> None:
        self.checkout, self.home = checkout, home
        self.process: subprocess.Popen | None = None
        self.url = ""

    def start(self) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        env = {**os.environ, "PYTHONPATH": str(self.checkout), "FACTORY_HOME": str(self.home)}
        env.pop("FACTORY_CATALOG", None)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "factory_cli.main", "ui", "--port", str(port), "--quiet"],
            cwd=self.checkout,
            env=env,
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"`factory ui` from {self.checkout} exited with {self.process.returncode}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.2)
        else:
            raise RuntimeError(f"`factory ui` from {self.checkout} did not listen within 120 s")
        self.url = f"http://127.0.0.1:{port}"

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise RuntimeError("no VmRSS in /proc: the benchmark reads the server's memory the Linux way")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)


if __name__ == "__main__":
    sys.exit(main())
