"""Loader benchmark: the loader, both backends, against bare ``tokenizer.encode_batch_fast``.

    .venv/bin/python benchmarks/loader/run.py            # about 5 minutes on 2 quiet cores

One command, same machine, same cores, same texts (the Python standard library's source,
written to an Iceberg table here). Each measurement runs in a fresh process, and the bare
tokenizer is measured before, between and after the loaders, so each loader sits between two
measurements of its baseline (the machine's speed drifts; ratios use the mean of those two):

(a) the practical limit: ``tokenizer.encode_batch_fast`` (the call the loader makes) over the
    table's documents, already in memory, 256 at a time, in a seeded order; ``encode_batch``
    beside it;
(b) the loader end to end from Iceberg (read Parquet, tokenize, pack, mix, collate to torch),
    ``backend="local"`` then ``backend="ray"``, each one whole run timed from the moment the
    loader is constructed until it has delivered ``--multiple`` (20) times its read-ahead's
    capacity: the whole run's tokens/s (its first batch and the read-ahead's filling
    included), the steady rate (the run's second half), and the seconds from construction to
    the first batch. The read-ahead's capacity is every sub-stream's unit being packed plus
    the units it may have queued or in flight (``ray_units_ahead`` or ``local_prefetch``), in
    tokens: what readers can produce that the consumer has not taken yet. For ``ray``,
    ``ray.init`` runs before construction and is reported beside it;
(c) ``load_state_dict`` + the first batch at global sequence 0 and at sequence 10^6.

and prints each loader figure beside the baseline, as a ratio. Results also go to
``<home>/results.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Files of 8 MB in row groups of 16 documents (about 270 KB): a reader decodes whole row groups,
# so a unit of one shuffle block (--shuffle-window rows) decodes little more than its own rows.
FILE_BYTES = 8e6
ROW_GROUP_ROWS = 16
sys.path.insert(0, str(REPO))


# --- the corpus ---------------------------------------------------------------------------


def stdlib_texts() -> list[tuple[str, str]]:
    root = Path(sysconfig.get_paths()["stdlib"])
    found = []
    for path in sorted(root.rglob("*.py")):
        if "site-packages" in path.parts or "dist-packages" in path.parts:
            continue
        try:
            found.append((str(path.relative_to(root)), path.read_text(encoding="utf-8")))
        except (UnicodeDecodeError, OSError):
            continue
    return found


def write_table(
    catalog, name: str, texts: list[tuple[str, str]], megabytes: int, row_group_rows: int | None = None
) -> int:
    """A document table of ``megabytes`` of source (the library repeated under new ids if needed), in
    files of 8 MB; in row groups of ``row_group_rows`` documents if given (else one a file)."""
    import pyarrow as pa

    from lakehouse.catalog import ensure_table
    from lakehouse.schemas import DOCUMENT_SCHEMA, arrow_schema

    table = ensure_table(catalog, ("bench", name), DOCUMENT_SCHEMA)
    if row_group_rows:
        with table.transaction() as transaction:
            transaction.set_properties({"write.parquet.row-group-limit": str(row_group_rows)})
        table = catalog.load_table(("bench", name))
    rows, size, copy = [], 0, 0
    while size < megabytes * 1e6:
        for path, text in texts:
            n = len(text.encode("utf-8"))
            doc_id = hashlib.sha256(f"{copy}:{path}".encode()).hexdigest()[:32]
            rows.append(
                {"doc_id": doc_id, "source": "code", "text": text, "path": path, "lang": "python", "n_bytes": n}
            )
            size += n
            if size >= megabytes * 1e6:
                break
        copy += 1
    schema = arrow_schema(DOCUMENT_SCHEMA)
    files = max(1, round(size / FILE_BYTES))
    per_file = -(-len(rows) // files)
    for start in range(0, len(rows), per_file):
        table.append(pa.Table.from_pylist(rows[start : start + per_file], schema=schema))
    return size


def prepare(home: Path, tables: dict[str, int], vocab: int) -> dict:
    from pyiceberg.catalog import load_catalog

    from lakehouse.catalog import embedded_catalog_properties
    from mixtures.pin import pin
    from mixtures.spec import spec_from_dict
    from streaming_loader.tokenizer_train import train_tokenizer

    (home / "warehouse").mkdir(parents=True, exist_ok=True)
    catalog = load_catalog("bench", **embedded_catalog_properties(home))
    texts = stdlib_texts()
    sizes = {name: write_table(catalog, name, texts, mb, ROW_GROUP_ROWS) for name, mb in tables.items()}
    for name in sizes:
        spec = spec_from_dict({"seed": 1, "components": [{"name": "code", "table": f"bench.{name}", "weight": 1}]})
        pin(catalog, spec).save(home / f"{name}.json")
    started = time.perf_counter()
    first = next(iter(sizes))
    (home / "tokenizer.json").write_text(train_tokenizer(catalog, [f"bench.{first}"], vocab, max_bytes=8 << 20).text)
    return {"bytes": sizes, "tokenizer_train_s": time.perf_counter() - started}


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


def measure_baseline(home: Path, corpus: str, tokens: int, calls: tuple[str, ...] = BASELINE_CALLS) -> dict:
    """(a): each bare call over ``corpus``'s documents, in memory, in a seeded order, 256 at a time."""
    import random

    import pyarrow.parquet as pq

    from mixtures.manifest import Manifest
    from streaming_loader.tokenize import load_tokenizer_spec

    tokenizer = load_tokenizer_spec(home / "tokenizer.json").load()
    texts = []
    for f in Manifest.load(home / f"{corpus}.json").components[0].files:
        texts.extend(pq.read_table(f.path.removeprefix("file://"), columns=["text"]).column(0).to_pylist())
    random.Random(0).shuffle(texts)  # a sample of the whole table when it holds more than ``tokens``
    results = {}
    for call in calls:
        encode = getattr(tokenizer, call)
        produced, docs, started, cpu = 0, 0, time.perf_counter(), time.process_time()
        while produced < tokens:
            for i in range(0, len(texts), 256):
                batch = texts[i : i + 256]
                produced += sum(len(e.ids) for e in encode(batch, add_special_tokens=False))
                docs += len(batch)
                if produced >= tokens:
                    break
        elapsed = time.perf_counter() - started
        cpu = time.process_time() - cpu
        results[call] = {
            "tokens": produced, "seconds": elapsed, "tokens_per_s": produced / elapsed,
            "cpu_s_per_mtok": cpu / produced * 1e6,
        }  # fmt: skip
    return {"corpus": corpus, "tokens_per_doc": produced / docs, **results}


def loader_options(backend: str, args: argparse.Namespace) -> dict:
    return {
        "seq_len": args.seq_len, "global_batch_size": args.batch, "backend": backend,
        "shuffle_window": args.shuffle_window, "read_bytes": args.read_bytes, "log_interval_s": 0,
    }  # fmt: skip


def read_ahead_units(backend: str, args: argparse.Namespace) -> int:
    """Units the loader may hold that the consumer has not taken: per sub-stream, the one being
    packed and those queued or in flight."""
    from streaming_loader.config import LoaderConfig

    config = LoaderConfig(**loader_options(backend, args))
    ahead = config.ray_units_ahead if backend == "ray" else config.local_prefetch
    return config.shards * (ahead + 1)


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
            home / "small.json", home / "tokenizer.json", **loader_options(backend, args)
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
    parser.add_argument("--mb", type=int, default=16, help="size of the table")
    parser.add_argument("--large-mb", type=int, default=0, help="also stream a table this large (memory bound)")
    parser.add_argument(
        "--shuffle-window", type=int, default=16,
        help="rows (source files average 17 KB: 16 rows is about 270 KB, one unit of steady work)",
    )  # fmt: skip
    parser.add_argument("--read-bytes", type=int, default=256 << 10, help="text bytes a unit of work grows to")
    parser.add_argument("--vocab", type=int, default=16384, help="tokenizer vocabulary")
    parser.add_argument("--multiple", type=float, default=20.0, help="read-ahead capacities each whole run delivers")
    parser.add_argument("--baseline-tokens", type=int, default=6_000_000, help="tokens per bare call, per measurement")
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--batch", type=int, default=16, help="global batch size (sequences)")
    parser.add_argument("--backends", nargs="+", default=["local", "ray"], choices=["local", "ray"])
    parser.add_argument("--no-seek", action="store_true", help="skip (c)")
    parser.add_argument("--encode-batch", action="store_true", help="also time bare encode_batch in (a)")
    parser.add_argument("--tokens", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, *rest = args.child
        if kind == "baseline":
            calls = (*BASELINE_CALLS, "encode_batch") if args.encode_batch else BASELINE_CALLS
            result = measure_baseline(args.home, rest[0], args.baseline_tokens, calls)
        elif kind == "stream":
            result = measure_stream(args.home, rest[0], rest[1], args.tokens, args)
        else:
            result = measure_seek(args.home, rest[0], args)
        print(json.dumps(result))
        return 0

    home = args.home or Path(tempfile.mkdtemp(prefix="loader-bench-"))
    print(f"working in {home} on {os.cpu_count()} CPU(s); load average {os.getloadavg()[0]:.1f}", flush=True)
    tables = {"small": args.mb} | ({"large": args.large_mb} if args.large_mb else {})
    if not (home / "tokenizer.json").exists():
        setup = prepare(home, tables, args.vocab)
        print(f"corpus bytes {setup['bytes']}; tokenizer trained in {setup['tokenizer_train_s']:.1f}s", flush=True)
    else:
        setup = {"reused": str(home)}
    common = ["--baseline-tokens", str(args.baseline_tokens), "--seq-len", str(args.seq_len)]
    common += ["--batch", str(args.batch), "--shuffle-window", str(args.shuffle_window)]
    common += ["--read-bytes", str(args.read_bytes)] + (["--encode-batch"] if args.encode_batch else [])
    baselines, streams = [], []
    for corpus in tables:
        baselines.append(run_child(home, common, "baseline", corpus))
        print(f"(a) {corpus}: {_rates(baselines[-1])}", flush=True)
        unit_tokens = max(1, int(args.read_bytes / (_bytes_per_row(home, corpus) * args.shuffle_window)))
        unit_tokens *= args.shuffle_window * baselines[-1]["tokens_per_doc"]
        for backend in args.backends:
            capacity = read_ahead_units(backend, args) * unit_tokens
            tokens = int(args.multiple * capacity)
            streams.append(run_child(home, [*common, "--tokens", str(tokens)], "stream", backend, corpus))
            streams[-1] |= {"capacity_tokens": capacity, "read_ahead_units": read_ahead_units(backend, args)}
            s = streams[-1]
            print(
                f"(b) {backend} {corpus}: whole run {s['whole_tokens_per_s']:,.0f} tokens/s, steady "
                f"{s['steady_tokens_per_s']:,.0f}, first batch {s['first_batch_s']:.2f}s, "
                f"{s['tokens'] / capacity:.1f} x read-ahead",
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


def _bytes_per_row(home: Path, corpus: str) -> float:
    from mixtures.manifest import Manifest

    files = Manifest.load(home / f"{corpus}.json").components[0].files
    return sum(f.text_bytes for f in files) / sum(f.record_count for f in files)


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
        f"{'backend':8} {'table':6} {'read-ahead':>18} {'run':>7} {'whole run':>12} {'ratio':>6} {'steady':>12} "
        f"{'ratio':>6} {'fast':>12} {'1st batch':>10} {'RSS MB':>7} {'workers MB':>10} {'CPU-s/Mt':>9} {'fast':>6}",
    ]
    for s in results["streams"]:
        fast = sum(bracketing_baseline(results, s, "encode_batch_fast")) / 2
        lines.append(
            f"{s['backend']:8} {s['corpus']:6} {s['read_ahead_units']:>3} units {s['capacity_tokens'] / 1e6:>5.2f} Mt "
            f"{s['tokens'] / s['capacity_tokens']:>6.1f}x {s['whole_tokens_per_s']:>12,.0f} "
            f"{s['whole_tokens_per_s'] / fast:>6.2f} {s['steady_tokens_per_s']:>12,.0f} "
            f"{s['steady_tokens_per_s'] / fast:>6.2f} {fast:>12,.0f} {s['first_batch_s']:>9.2f}s "
            f"{s['peak_rss_mb']:>7.0f} {s['peak_ray_workers_rss_mb']:>10.0f} {s['cpu_s_per_mtok']:>9.2f} "
            f"{sum(bracketing_baseline(results, s, 'encode_batch_fast', 'cpu_s_per_mtok')) / 2:>6.2f}"
        )
    ray_init = [s["ray_init_s"] for s in results["streams"] if s["backend"] == "ray"]
    if ray_init:
        lines.append(f"(ray.init took {max(ray_init):.1f}s before construction, not counted above)")
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
