"""A snapshot's lineage as a graph: raw input → ingest → dedup → filter → manifest → run →
checkpoints → eval results (and how many samples back them), laid out in columns and drawn as SVG by the template.

Upstream comes from the snapshots' ``factory.*`` summaries (trainer.lineage.pipeline_runs, the
walk ``factory lineage`` does); downstream from the manifests that pin the snapshot, the runs that
trained on them (their checkpoints' lineage.json) and the eval results recorded for those runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import quote

from trainer.lineage import pipeline_runs
from ui.evals import eval_rows, sample_counts
from ui.sources import Sources, checkpoint_dirs, run_manifest_fingerprint

STAGES = ["raw input", "ingest", "dedup", "filter", "snapshot", "manifest", "run", "checkpoint", "eval"]
NODE_W, NODE_H, GAP_X, GAP_Y, PAD = 170, 46, 40, 14, 20
LABEL_CHARS = 24


@dataclass
class Node:
    id: str
    stage: str
    label: str
    detail: str
    href: str
    focus: bool = False
    x: int = 0
    y: int = 0

    @property
    def short_label(self) -> str:
        return _shorten(self.label)

    @property
    def short_detail(self) -> str:
        return _shorten(self.detail)


@dataclass
class Graph:
    nodes: dict[str, Node] = field(default_factory=dict)
    edges: set[tuple[str, str]] = field(default_factory=set)
    columns: list[str] = field(default_factory=list)
    width: int = 0
    height: int = 0

    def add(self, node: Node) -> str:
        self.nodes.setdefault(node.id, node)
        return node.id

    def link(self, source: str, target: str) -> None:
        self.edges.add((source, target))

    def paths(self) -> list[str]:
        """SVG path data of each edge, left node's right side to right node's left side."""
        out = []
        for a, b in sorted(self.edges):
            s, t = self.nodes[a], self.nodes[b]
            x1, y1, x2, y2 = s.x + NODE_W, s.y + NODE_H // 2, t.x, t.y + NODE_H // 2
            mid = (x1 + x2) // 2
            out.append(f"M{x1},{y1} C{mid},{y1} {mid},{y2} {x2},{y2}")
        return out


def snapshot_href(table: str, snapshot_id: int) -> str:
    return f"/tables/{quote(table)}/snapshots/{snapshot_id}"


def snapshot_graph(sources: Sources, table: str, snapshot_id: int) -> Graph:
    graph = Graph()
    focus = f"snap:{table}@{snapshot_id}"
    runs = pipeline_runs(sources.catalog, table, snapshot_id)
    if runs:
        for run in runs:
            node = _add_run(graph, run)
            graph.nodes[node].focus = graph.nodes[node].focus or run["snapshot_id"] == snapshot_id
        tops = [f"run:{run['table']}@{run['snapshot_id']}" for run in runs]
    else:
        graph.add(Node(focus, "snapshot", f"{table}", f"@{snapshot_id}", snapshot_href(table, snapshot_id), True))
        tops = [focus]
    _add_downstream(graph, sources, table, snapshot_id, tops)
    _layout(graph)
    return graph


def _add_run(graph: Graph, run: dict) -> str:
    node_id = f"run:{run['table']}@{run['snapshot_id']}"
    if node_id in graph.nodes:
        return node_id
    stage = run["job"] if run["job"] in STAGES else "snapshot"
    graph.add(
        Node(
            node_id,
            stage,
            f"{run['job']} → {run['table']}",
            f"@{run['snapshot_id']} run {run['run_id']}",
            snapshot_href(run["table"], run["snapshot_id"]),
        )
    )
    for entry in run["inputs"]:
        if "table" in entry:
            for upstream in entry.get("runs", []):
                graph.link(_add_run(graph, upstream), node_id)
        else:
            uri = str(entry.get("uri", entry))
            raw = graph.add(
                Node(
                    f"raw:{uri}",
                    "raw input",
                    uri.rsplit("/", 1)[-1] or uri,
                    uri,
                    snapshot_href(run["table"], run["snapshot_id"]) + "#inputs",
                )
            )
            graph.link(raw, node_id)
    return node_id


def _add_downstream(graph: Graph, sources: Sources, table: str, snapshot_id: int, tops: list[str]) -> None:
    fingerprints = []
    for found in sources.manifests():
        if any(c.table == table and c.snapshot_id == snapshot_id for c in found.manifest.components):
            node = graph.add(
                Node(
                    f"manifest:{found.fingerprint}",
                    "manifest",
                    found.manifest.name or "manifest",
                    found.fingerprint[:12],
                    f"/manifests/{found.fingerprint}",
                )
            )
            for top in tops:
                graph.link(top, node)
            fingerprints.append(found.fingerprint)
    if not fingerprints:
        return
    evals = eval_rows(sources)
    samples = sample_counts(sources) if evals else {}
    for run in sources.runs():
        fingerprint = run_manifest_fingerprint(run)
        if fingerprint not in fingerprints:
            continue
        run_node = graph.add(Node(f"trun:{run.key}", "run", run.path.name, run.key, f"/runs/{quote(run.key)}"))
        graph.link(f"manifest:{fingerprint}", run_node)
        for step_dir in checkpoint_dirs(run):
            step = int(step_dir.name[5:])
            ckpt = graph.add(
                Node(
                    f"ckpt:{run.key}:{step}",
                    "checkpoint",
                    f"step {step}",
                    run.path.name,
                    f"/runs/{quote(run.key)}/checkpoints/{step}",
                )
            )
            graph.link(run_node, ckpt)
            results = [r for r in evals if _belongs(r, run, step_dir, step)]
            if results:
                suites = sorted({str(r.get("suite")) for r in results})
                kept = sum(n for folder, n in samples.items() if _belongs({"checkpoint": folder}, run, step_dir, step))
                node = graph.add(
                    Node(
                        f"eval:{run.key}:{step}",
                        "eval",
                        f"{len(results)} results, {kept} samples" if kept else f"{len(results)} eval result(s)",
                        ", ".join(suites),
                        f"/runs/{quote(run.key)}#evals",
                    )
                )
                graph.link(ckpt, node)


def _belongs(row: dict, run, step_dir, step: int) -> bool:
    run_ids = {run.key, run.path.name, str(run.path)}
    checkpoint = str(row.get("checkpoint") or "")
    if checkpoint:
        return checkpoint in (str(step_dir), step_dir.name) or checkpoint.rstrip("/").endswith(
            f"{run.path.name}/checkpoints/{step_dir.name}"
        )
    return row.get("run_id") in run_ids and row.get("step") == step


def _layout(graph: Graph) -> None:
    used = [s for s in STAGES if any(n.stage == s for n in graph.nodes.values())]
    graph.columns = used
    tallest = 0
    for col, stage in enumerate(used):
        members = sorted((n for n in graph.nodes.values() if n.stage == stage), key=lambda n: n.id)
        for row, node in enumerate(members):
            node.x = PAD + col * (NODE_W + GAP_X)
            node.y = PAD + 20 + row * (NODE_H + GAP_Y)
        tallest = max(tallest, len(members))
    graph.width = PAD * 2 + max(len(used), 1) * (NODE_W + GAP_X)
    graph.height = PAD * 2 + 20 + tallest * (NODE_H + GAP_Y)


def _shorten(text: str) -> str:
    return text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 1] + "…"
