"""Loader benchmark: the loader, both backends, against bare ``tokenizer.encode_batch_fast``, on the
tables the factory's own jobs write.

    .venv/bin/python benchmarks/loader/run.py              # the user's path: 6 copies, ~240 MB
    .venv/bin/python benchmarks/loader/run.py --copies 1   # a quick check on one copy
    .venv/bin/python benchmarks/loader/run.py --big-docs 3 --tables big --backends local --runs 1
                                                          # memory with 50 MB documents

Its inputs are made as a new user makes them, with the factory's own commands and their default
options, in a fresh ``FACTORY_HOME`` under the working folder: every ``.py`` file of the Python
standard library as one JSON line, that file copied ``--copies`` times; ``factory ingest
--format jsonl``; ``factory filter --config code`` over the ingest table; ``factory tokenizer
train`` on the ingest table; ``factory mix pin`` of each table. Nothing here writes a table
itself or chooses its layout: what the jobs write is what the loader reads (the layout is
printed and kept in ``setup.json``).

Each measurement runs in a fresh process, and the bare tokenizer is measured before, between and
after the loaders, so each loader run sits between two measurements of its baseline (the
machine's speed drifts; ratios use the mean of those two), ``--runs`` (3) runs of each:

(a) the practical limit: ``tokenizer.encode_batch_fast`` (the call the loader makes) over all of
    the table's documents, already in memory, 256 at a time, in a seeded order;
    ``encode_batch`` beside it with ``--encode-batch``;
(b) the loader end to end from Iceberg (read Parquet, tokenize, pack, mix, collate to torch),
    with its default settings, ``backend="local"`` then ``backend="ray"``, each one whole run
    timed from the moment the loader is constructed until it has delivered as many tokens as the
    table holds (the whole stream, one epoch): the whole run's tokens/s, the steady rate (the
    run's second half), the seconds from construction to the first batch and the peak resident
    memory. For ``ray``, ``ray.init`` runs before construction and is reported beside it (the
    cold start is the two together);
(c) ``load_state_dict`` + the first batch at global sequence 0 and at sequence 10^6.

and prints each loader figure beside the baseline, as a ratio. Results also go to
``<home>/results.json``; ``--home`` of an earlier run measures again on its tables.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from benchmarks.user_path import (  # noqa: E402
    factory,
    ingest_corpus,
    pin_table,
    stdlib_texts,
    write_jsonl,
    write_stdlib_corpus,
)

# The bare call's texts go to it this many at a time, as a training job's collate would batch them.
BASELINE_BATCH = 256


# --- the corpus, made on the user's path (benchmarks/user_path.py) --------------------------------


def prepare(home: Path, copies: int, vocab: int) -> dict:
    """The user's path: the library's files as JSON lines, ``copies`` times over; ``factory ingest``,
    ``factory filter`` (the shipped ``code`` config), ``factory tokenizer train`` and ``factory mix
    pin``, each with its default options."""
    seconds = {}
    jsonl = write_stdlib_corpus(home / "corpus", copies=copies)
    seconds["ingest"] = ingest_corpus(home / "corpus", "raw.code")
    seconds["filter"] = factory("filter", "--input", "raw.code", "--output", "filtered.code", "--config", "code")
    seconds["tokenizer_train"] = factory(
        "tokenizer",
        "train",
        "--input",
        "raw.code",
        "--vocab-size",
        str(vocab),
        "--output",
        str(home / "tokenizer.json"),
    )
    tables = {"ingest": "raw.code", "filter": "filtered.code"}
    seconds |= {f"pin_{name}": pin_table(home, name, table) for name, table in tables.items()}
    return {
        "jsonl_bytes": jsonl,
        "copies": copies,
        "tables": tables,
        "seconds": seconds,
        "layout": layout(home, tables),
    }


def prepare_big(home: Path, setup: dict, big_docs: int, big_doc_mb: int) -> dict:
    """Table ``big``: ``big_docs`` documents of ``big_doc_mb`` MB each beside one copy of the library,
    through ``factory ingest`` with its size limit raised for them."""
    texts = stdlib_texts()
    joined, big = "\n".join(t for _, t in texts), []
    for d in range(big_docs):
        text = (joined * (1 + big_doc_mb * 10**6 // len(joined)))[: big_doc_mb * 10**6]
        big.append({"text": f"# document {d}\n{text}", "path": f"big/{d}.py"})
    write_jsonl(home / "big" / "big.jsonl", big)
    write_jsonl(home / "big" / "stdlib.jsonl", [{"text": t, "path": p} for p, t in texts])
    setup["seconds"]["ingest_big"] = ingest_corpus(
        home / "big", "raw.big", "--max-doc-bytes", str(2 * big_doc_mb * 10**6)
    )
    setup["tables"]["big"] = "raw.big"
    setup["seconds"]["pin_big"] = pin_table(home, "big", "raw.big")
    setup["layout"] = layout(home, setup["tables"])
    return setup


def layout(home: Path, tables: dict[str, str]) -> dict:
    """What the jobs wrote: files, row groups and text bytes of each pinned table."""
    from mixtures.manifest import Manifest

    found = {}
    for name in tables:
        files = Manifest.load(home / f"{name}.json").components[0].files
        groups = [g for f in files for g in f.row_groups]
        found[name] = {
            "files": len(files), "rows": sum(f.record_count for f in files), "row_groups": len(groups),
            "max_rows_per_group": max(groups, default=0), "text_bytes": sum(f.text_bytes for f in files),
        }  # fmt: skip
    return found


# --- measurements, each in its own process ------------------------------------------------------


class RssSampler(threading.Thread):
    """Peak resident memory of this process (and of Ray's workers, when asked), sampled."""

    def __init__(self, raylet_pid: int | None = None) -> None:
        super().__init__(daemon=True)
        self.raylet_pid, self.peak_self, self.peak_workers, self.done = raylet_pid, 0, 0, threading.Event()

    def run(self) -> None:
        # Sampled first and last too: a run shorter than one interval still gets its figure.
        self._sample()
        while not self.done.wait(0.25):  # resident memory moves slowly; a scan of /proc costs CPU
            self._sample()
        self._sample()

    def _sample(self) -> None:
        self.peak_self = max(self.peak_self, _rss(os.getpid()))
        if self.raylet_pid:
            workers = sum(_rss(p) for p in _children(self.raylet_pid))
            self.peak_workers = max(self.peak_workers, workers)


def _rss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _cpu_s(pids: list[int]) -> float:
    """CPU seconds (user + system) the processes have used so far."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def _ray_processes(raylet: int | None) -> list[int]:
    """This process, and with Ray the raylet, its workers and the session's other daemons."""
    if raylet is None:
        return [os.getpid()]
    import ray

    daemons = [p.process.pid for ps in ray._private.worker._global_node.all_processes.values() for p in ps]
    return [os.getpid(), *daemons, *_children(raylet)]


def _children(parent: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1]) == parent:
                    found.append(int(entry))
            except (OSError, ValueError, IndexError):
                continue
    return found


# The bare call (a) times: encode_batch_fast, the bar and the call the loader makes (the ids of
# encode_batch without each token's character offsets). --encode-batch adds encode_batch, the
# first round's bar (1.4-1.6 times slower here).
BASELINE_CALLS = ("encode_batch_fast",)


def table_texts(home: Path, corpus: str) -> list[str]:
    import pyarrow.parquet as pq

    from mixtures.manifest import Manifest

    texts = []
    for f in Manifest.load(home / f"{corpus}.json").components[0].files:
        texts.extend(pq.read_table(f.path.removeprefix("file://"), columns=["text"]).column(0).to_pylist())
    return texts


def measure_baseline(home: Path, corpus: str, calls: tuple[str, ...] = BASELINE_CALLS) -> dict:
    """(a): each bare call over all of ``corpus``'s documents, in memory, in a seeded order, 256 at a time."""
    import random

    from streaming_loader.tokenize import load_tokenizer_spec

    tokenizer = load_tokenizer_spec(home / "tokenizer.json").load()
    texts = table_texts(home, corpus)
    random.Random(0).shuffle(texts)
    results = {}
    for call in calls:
        encode = getattr(tokenizer, call)
        produced, started, cpu = 0, time.perf_counter(), time.process_time()
        for i in range(0, len(texts), BASELINE_BATCH):
            produced += sum(len(e.ids) for e in encode(texts[i : i + BASELINE_BATCH], add_special_tokens=False))
        elapsed = time.perf_counter() - started
        cpu = time.process_time() - cpu
        results[call] = {
            "tokens": produced, "seconds": elapsed, "tokens_per_s": produced / elapsed,
            "cpu_s_per_mtok": cpu / produced * 1e6,
        }  # fmt: skip
    return {"corpus": corpus, "docs": len(texts), **results}


def loader_options(backend: str, args: argparse.Namespace) -> dict:
    """The loader's defaults but for the batch shape (and its progress log, off)."""
    return {"seq_len": args.seq_len, "global_batch_size": args.batch, "backend": backend, "log_interval_s": 0}


def measure_stream(home: Path, backend: str, corpus: str, tokens: int, args: argparse.Namespace) -> dict:
    """(b): one whole run from construction until ``tokens`` are delivered."""
    from streaming_loader import StreamingLoader

    ray_init_s, raylet = 0.0, None
    if backend == "ray":
        import ray

        started = time.perf_counter()
        ray.init(include_dashboard=False, logging_level="WARNING")
        ray_init_s = time.perf_counter() - started
        raylet = ray._private.worker._global_node.all_processes["raylet"][0].process.pid
    sampler = RssSampler(raylet)
    sampler.start()
    per_batch = args.seq_len * args.batch
    cpu_before = _cpu_s(_ray_processes(raylet))
    started = time.perf_counter()
    loader = StreamingLoader.from_manifest(
        home / f"{corpus}.json", home / "tokenizer.json", **loader_options(backend, args)
    )
    next(loader)
    first = time.perf_counter() - started
    delivered, half = per_batch, None
    while delivered < tokens:
        next(loader)
        delivered += per_batch
        if half is None and delivered >= tokens // 2:
            half = (delivered, time.perf_counter())
    ended = time.perf_counter()
    cpu = _cpu_s(_ray_processes(raylet)) - cpu_before  # workers started since are counted whole
    sampler.done.set()
    sampler.join()
    tasks = getattr(loader._backend, "tasks", None)
    loader.close()
    return {
        "backend": backend,
        "corpus": corpus,
        "ray_init_s": ray_init_s,
        "first_batch_s": first,
        "tokens": delivered,
        "seconds": ended - started,
        "whole_tokens_per_s": delivered / (ended - started),
        "steady_tokens_per_s": (delivered - half[0]) / (ended - half[1]),
        "reader_tasks": tasks,
        "cpu_s_per_mtok": cpu / delivered * 1e6,
        "peak_rss_mb": sampler.peak_self / 2**20,
        "peak_ray_workers_rss_mb": sampler.peak_workers / 2**20,
    }


def measure_seek(home: Path, backend: str, args: argparse.Namespace) -> dict:
    from streaming_loader import StreamingLoader

    if backend == "ray":
        import ray

        ray.init(include_dashboard=False, logging_level="WARNING")

    def fresh():
        return StreamingLoader.from_manifest(
            home / "ingest.json", home / "tokenizer.json", **loader_options(backend, args)
        )

    with fresh() as warm:  # a real state, then the same cursors moved a thousand epochs on
        next(warm)  # (and the worker processes started, so both seeks below find them warm)
        start_state = warm.state_dict()
        start_state["batch"], start_state["schedule"] = 0, [0]
        start_state["shards"] = {s: {"code": [0, 0, 0]} for s in start_state["shards"]}
        late_state = json.loads(json.dumps(start_state))
        late_state["batch"] = 10**6 // args.batch
        for shard, cursors in late_state["shards"].items():  # inside every shard's slice of the table
            cursors["code"] = [1000 + int(shard), (17 * (int(shard) + 1)) % warm.plan.slice_length(0, int(shard)), 0]
    timings = {}
    for label, state in (("sequence_0", start_state), ("sequence_1e6", late_state)):
        with fresh() as loader:
            started = time.perf_counter()
            loader.load_state_dict(state)
            loaded = time.perf_counter() - started
            next(loader)
            timings[label] = {"load_state_dict_s": loaded, "load_and_first_batch_s": time.perf_counter() - started}
    return {"backend": backend, "state_bytes": len(json.dumps(late_state)), **timings}


# --- the driver ------------------------------------------------------------------------------------


def run_child(home: Path, common: list[str], *args: str, script: str = __file__) -> dict:
    """One measurement in a fresh process: ``script --child`` (this file, or another benchmark's)."""
    done = subprocess.run(
        [sys.executable, script, "--home", str(home), *common, "--child", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "RAY_DISABLE_USAGE_STATS": "1"},
    )
    if done.returncode != 0:
        raise SystemExit(f"benchmark step {args} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, help="working folder (default: a fresh temporary one)")
    parser.add_argument("--copies", type=int, default=6, help="copies of the library ingested (1: a quick check)")
    parser.add_argument("--runs", type=int, default=3, help="runs of each loader, interleaved with the baseline")
    parser.add_argument("--tables", nargs="+", default=["ingest", "filter"], choices=["ingest", "filter", "big"])
    parser.add_argument("--big-docs", type=int, default=0, help="also make table 'big': this many huge documents")
    parser.add_argument("--big-doc-mb", type=int, default=50, help="size of each huge document")
    parser.add_argument("--vocab", type=int, default=16384, help="tokenizer vocabulary")
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--batch", type=int, default=16, help="global batch size (sequences)")
    parser.add_argument("--backends", nargs="+", default=["local", "ray"], choices=["local", "ray"])
    parser.add_argument("--no-seek", action="store_true", help="skip (c)")
    parser.add_argument("--prepare-only", action="store_true", help="make the tables, measure nothing")
    parser.add_argument("--encode-batch", action="store_true", help="also time bare encode_batch in (a)")
    parser.add_argument("--tokens", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, *rest = args.child
        if kind == "baseline":
            calls = (*BASELINE_CALLS, "encode_batch") if args.encode_batch else BASELINE_CALLS
            result = measure_baseline(args.home, rest[0], calls)
        elif kind == "stream":
            result = measure_stream(args.home, rest[0], rest[1], args.tokens, args)
        else:
            result = measure_seek(args.home, rest[0], args)
        print(json.dumps(result))
        return 0

    home = (args.home or Path(tempfile.mkdtemp(prefix="loader-bench-"))).resolve()
    os.environ["FACTORY_HOME"] = str(home / "factory")  # a lakehouse of its own, as a new user starts with
    print(f"working in {home} on {os.cpu_count()} CPU(s); load average {os.getloadavg()[0]:.1f}", flush=True)
    if not (home / "setup.json").exists():
        setup = prepare(home, args.copies, args.vocab)
        (home / "setup.json").write_text(json.dumps(setup, indent=2))
        print(f"made on the user's path: {json.dumps(setup)}", flush=True)
    setup = json.loads((home / "setup.json").read_text())
    if args.big_docs and "big" not in setup["tables"]:
        setup = prepare_big(home, setup, args.big_docs, args.big_doc_mb)
        (home / "setup.json").write_text(json.dumps(setup, indent=2))
        print(f"table big: {json.dumps(setup['layout']['big'])}", flush=True)
    if args.prepare_only:
        return 0
    common = ["--seq-len", str(args.seq_len), "--batch", str(args.batch)]
    common += ["--encode-batch"] if args.encode_batch else []
    baselines, streams = [], []
    for corpus in args.tables:
        baselines.append(run_child(home, common, "baseline", corpus))
        print(f"(a) {corpus}: {_rates(baselines[-1])}", flush=True)
        for _ in range(args.runs):
            for backend in args.backends:
                # The whole stream: as many tokens as the table holds (one epoch, as the baseline encodes it).
                tokens = next(b for b in baselines if b["corpus"] == corpus)["encode_batch_fast"]["tokens"]
                streams.append(run_child(home, [*common, "--tokens", str(tokens)], "stream", backend, corpus))
                s = streams[-1]
                print(
                    f"(b) {backend} {corpus}: whole run {s['whole_tokens_per_s']:,.0f} tokens/s, steady "
                    f"{s['steady_tokens_per_s']:,.0f}, first batch {s['first_batch_s']:.2f}s, "
                    f"ray.init {s['ray_init_s']:.2f}s, peak RSS {s['peak_rss_mb']:.0f} MB",
                    flush=True,
                )
                baselines.append(run_child(home, common, "baseline", corpus))
                print(f"(a) {corpus}, again: {_rates(baselines[-1])}", flush=True)
    seeks = [] if args.no_seek else [run_child(home, common, "seek", backend) for backend in args.backends]
    results = {
        "setup": setup,
        "settings": {k: str(v) for k, v in vars(args).items()} | {"cpus": os.cpu_count()},
        "load_average_end": os.getloadavg(),
        "baselines": baselines,
        "streams": streams,
        "seeks": seeks,
    }
    (home / "results.json").write_text(json.dumps(results, indent=2))
    print()
    print(report(results))
    return 0


def _rates(baseline: dict) -> str:
    calls = [c for c in (*BASELINE_CALLS, "encode_batch") if c in baseline]
    return ", ".join(f"{call} {baseline[call]['tokens_per_s']:,.0f}" for call in calls) + " tokens/s"


def bracketing_baseline(results: dict, stream: dict, call: str, key: str = "tokens_per_s") -> tuple[float, float]:
    """The bare call's rate (or ``key``) measured just before and just after ``stream`` on its table."""
    runs = [b for b in results["baselines"] if b["corpus"] == stream["corpus"]]
    position = [s for s in results["streams"] if s["corpus"] == stream["corpus"]].index(stream)
    return runs[position][call][key], runs[position + 1][call][key]


def report(results: dict) -> str:
    lines = ["(a) bare calls over the table's documents in memory, before / between / after the loaders"]
    for call in [c for c in (*BASELINE_CALLS, "encode_batch") if c in results["baselines"][0]]:
        for corpus in dict.fromkeys(b["corpus"] for b in results["baselines"]):
            runs = " / ".join(f"{b[call]['tokens_per_s']:,.0f}" for b in results["baselines"] if b["corpus"] == corpus)
            lines.append(f"  {corpus:6} {call:18} {runs} tokens/s")
    lines += [
        "",
        "(b) loader end to end from Iceberg, one run each from construction; ratios to the mean of the bare",
        "    encode_batch_fast measured just before and just after it",
        f"{'backend':8} {'table':6} {'tokens':>8} {'whole run':>12} {'ratio':>6} {'steady':>12} "
        f"{'ratio':>6} {'fast':>12} {'1st batch':>10} {'RSS MB':>7} {'workers MB':>10} {'CPU-s/Mt':>9} {'fast':>6}",
    ]
    for s in results["streams"]:
        fast = sum(bracketing_baseline(results, s, "encode_batch_fast")) / 2
        lines.append(
            f"{s['backend']:8} {s['corpus']:6} {s['tokens'] / 1e6:>6.1f}Mt {s['whole_tokens_per_s']:>12,.0f} "
            f"{s['whole_tokens_per_s'] / fast:>6.2f} {s['steady_tokens_per_s']:>12,.0f} "
            f"{s['steady_tokens_per_s'] / fast:>6.2f} {fast:>12,.0f} {s['first_batch_s']:>9.2f}s "
            f"{s['peak_rss_mb']:>7.0f} {s['peak_ray_workers_rss_mb']:>10.0f} {s['cpu_s_per_mtok']:>9.2f} "
            f"{sum(bracketing_baseline(results, s, 'encode_batch_fast', 'cpu_s_per_mtok')) / 2:>6.2f}"
        )
    for s in (s for s in results["streams"] if s["backend"] == "ray"):
        fast = sum(bracketing_baseline(results, s, "encode_batch_fast")) / 2
        cold = s["tokens"] / (s["seconds"] + s["ray_init_s"])
        lines.append(
            f"ray cold, {s['corpus']}: ray.init {s['ray_init_s']:.1f}s + first batch {s['first_batch_s']:.1f}s = "
            f"{s['ray_init_s'] + s['first_batch_s']:.1f}s; whole run with ray.init {cold:,.0f} tokens/s, {cold / fast:.2f}x"
        )
    if results["seeks"]:
        lines += ["", "(c) load_state_dict, and load + first batch, at global sequence 0 and 10^6"]
    for s in results["seeks"]:
        a, b = s["sequence_0"], s["sequence_1e6"]
        lines.append(
            f"{s['backend']:8} load {a['load_state_dict_s'] * 1e3:.1f} ms vs {b['load_state_dict_s'] * 1e3:.1f} ms; "
            f"with first batch {a['load_and_first_batch_s']:.2f}s vs {b['load_and_first_batch_s']:.2f}s "
            f"(ratio {b['load_and_first_batch_s'] / a['load_and_first_batch_s']:.2f}); state {s['state_bytes']} bytes"
        )
    lines.append(
        "CPU-s/Mt: CPU seconds per million tokens delivered, every process of the loader (with Ray: the workers "
        "and Ray's daemons) beside the bare call's"
    )
    lines.append(f"load average at the end: {', '.join(f'{x:.1f}' for x in results['load_average_end'])}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
