"""Loader benchmark: the loader, both backends, against bare ``tokenizer.encode_batch``.

    .venv/bin/python benchmarks/loader/run.py            # about 11 minutes on 2 quiet cores

One command, same machine, same cores, same texts (the Python standard library's source,
written to Iceberg tables here). It measures, each in a fresh process:

(a) the practical limit: ``tokenizer.encode_batch`` over the same table's documents, already
    in memory, 256 at a time; and ``encode_batch_fast`` (the same ids without character
    offsets: the call the loader makes). Measured before and after the loaders run on that
    table, so a drift of the machine's speed shows; ratios use the mean;
(b) the loader end to end from Iceberg (read Parquet, tokenize, pack, mix, collate to torch),
    ``backend="local"`` and ``backend="ray"``: tokens/s in steady state, seconds from
    construction to the first batch, and resident memory while streaming from a small and an
    8x larger table. Steady state is timed after ``--warmup-tokens``: until then the readers
    also fill the loader's bounded read-ahead (``ray_units_ahead`` units for each of the 16
    sub-streams, 32 blocks of 64 documents, plus the block each packer holds: up to about 16 M
    tokens here, so the default warm-up is twice that), work a training run pays once; the
    warm-up's own rate is reported beside it;
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
# A reader decodes a row group from its start, so the tables keep one file and row-group size
# (8 MB) and only their length differs between the small and the large one.
FILE_BYTES = 8e6
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


def write_table(catalog, name: str, texts: list[tuple[str, str]], megabytes: int) -> int:
    """A document table of ``megabytes`` of source (the library repeated under new ids if needed)."""
    import pyarrow as pa

    from lakehouse.catalog import ensure_table
    from lakehouse.schemas import DOCUMENT_SCHEMA, arrow_schema

    table = ensure_table(catalog, ("bench", name), DOCUMENT_SCHEMA)
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
    files = max(1, round(size / FILE_BYTES))  # files (and row groups) of one size whatever the table's
    per_file = -(-len(rows) // files)
    for start in range(0, len(rows), per_file):
        table.append(pa.Table.from_pylist(rows[start : start + per_file], schema=schema))
    return size


def prepare(home: Path, small_mb: int, large_mb: int, vocab: int) -> dict:
    from pyiceberg.catalog import load_catalog

    from lakehouse.catalog import embedded_catalog_properties
    from mixtures.pin import pin
    from mixtures.spec import spec_from_dict
    from streaming_loader.tokenizer_train import train_tokenizer

    (home / "warehouse").mkdir(parents=True, exist_ok=True)
    catalog = load_catalog("bench", **embedded_catalog_properties(home))
    texts = stdlib_texts()
    sizes = {
        "small": write_table(catalog, "small", texts, small_mb),
        "large": write_table(catalog, "large", texts, large_mb),
    }
    for name in sizes:
        spec = spec_from_dict({"seed": 1, "components": [{"name": "code", "table": f"bench.{name}", "weight": 1}]})
        pin(catalog, spec).save(home / f"{name}.json")
    started = time.perf_counter()
    (home / "tokenizer.json").write_text(train_tokenizer(catalog, ["bench.small"], vocab, max_bytes=8 << 20).text)
    return {"bytes": sizes, "tokenizer_train_s": time.perf_counter() - started}


# --- measurements, each in its own process ------------------------------------------------------


class RssSampler(threading.Thread):
    """Peak resident memory of this process (and of Ray's workers, when asked), sampled."""

    def __init__(self, raylet_pid: int | None = None) -> None:
        super().__init__(daemon=True)
        self.raylet_pid, self.peak_self, self.peak_workers, self.done = raylet_pid, 0, 0, threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.25):  # resident memory moves slowly; a scan of /proc costs CPU
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


# The bare calls (a) times: encode_batch is the named baseline; encode_batch_fast gives
# the same ids without character offsets, and is what the loader itself calls.
BASELINE_CALLS = ("encode_batch", "encode_batch_fast")


def measure_baseline(home: Path, corpus: str, tokens: int) -> dict:
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
    for call in BASELINE_CALLS:
        encode = getattr(tokenizer, call)
        produced, started = 0, time.perf_counter()
        while produced < tokens:
            for i in range(0, len(texts), 256):
                produced += sum(len(e.ids) for e in encode(texts[i : i + 256], add_special_tokens=False))
                if produced >= tokens:
                    break
        elapsed = time.perf_counter() - started
        results[call] = {"tokens": produced, "seconds": elapsed, "tokens_per_s": produced / elapsed}
    return {"corpus": corpus, **results}


def measure_stream(
    home: Path, backend: str, corpus: str, tokens: int, warmup: int, seq_len: int, batch: int, window: int
) -> dict:
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
    started = time.perf_counter()
    loader = StreamingLoader.from_manifest(
        home / f"{corpus}.json", home / "tokenizer.json", seq_len=seq_len, global_batch_size=batch,
        backend=backend, shuffle_window=window, log_interval_s=0,
    )  # fmt: skip
    next(loader)
    first = time.perf_counter() - started
    delivered, after_first = 0, time.perf_counter()
    while delivered < warmup:  # the read-ahead fills (bounded: units_ahead per sub-stream)
        next(loader)
        delivered += seq_len * batch
    warm_tokens, steady = delivered, time.perf_counter()
    while delivered < warmup + tokens:
        next(loader)
        delivered += seq_len * batch
    ended = time.perf_counter()
    sampler.done.set()
    sampler.join()
    loader.close()
    return {
        "backend": backend,
        "corpus": corpus,
        "ray_init_s": ray_init_s,
        "first_batch_s": first,
        "tokens": delivered - warm_tokens,
        "seconds": ended - steady,
        "tokens_per_s": (delivered - warm_tokens) / (ended - steady),
        "warmup_tokens": warm_tokens,
        "warmup_tokens_per_s": warm_tokens / (steady - after_first) if warm_tokens else None,
        "peak_rss_mb": sampler.peak_self / 2**20,
        "peak_ray_workers_rss_mb": sampler.peak_workers / 2**20,
    }


def measure_seek(home: Path, backend: str, seq_len: int, batch: int, window: int) -> dict:
    from streaming_loader import StreamingLoader

    if backend == "ray":
        import ray

        ray.init(include_dashboard=False, logging_level="WARNING")

    def fresh():
        return StreamingLoader.from_manifest(
            home / "large.json", home / "tokenizer.json", seq_len=seq_len, global_batch_size=batch,
            backend=backend, shuffle_window=window, log_interval_s=0,
        )  # fmt: skip

    with fresh() as warm:  # a real state, then the same cursors moved a thousand epochs on
        next(warm)  # (and the worker processes started, so both seeks below find them warm)
        start_state = warm.state_dict()
        start_state["batch"], start_state["schedule"] = 0, [0]
        start_state["shards"] = {s: {"code": [0, 0, 0]} for s in start_state["shards"]}
        late_state = json.loads(json.dumps(start_state))
        late_state["batch"] = 10**6 // batch
        for shard, cursors in late_state["shards"].items():
            cursors["code"] = [1000 + int(shard), 17 * (int(shard) + 1), 0]
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


def run_child(home: Path, common: list[str], *args: str) -> dict:
    done = subprocess.run(
        [sys.executable, __file__, "--home", str(home), *common, "--child", *args],
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
    parser.add_argument("--small-mb", type=int, default=16, help="size of the small table")
    parser.add_argument("--large-mb", type=int, default=128, help="size of the large table")
    parser.add_argument(
        "--shuffle-window", type=int, default=64,
        help="rows (source files average 17 KB: 64 rows is about 1 MB, one read of steady work)",
    )  # fmt: skip
    parser.add_argument("--vocab", type=int, default=16384, help="tokenizer vocabulary")
    parser.add_argument("--tokens", type=int, default=32_000_000, help="tokens per throughput measurement")
    parser.add_argument(
        "--warmup-tokens", type=int, default=32_000_000,
        help="tokens a loader delivers after its first batch before (b) is timed: its read-ahead fills meanwhile",
    )  # fmt: skip
    parser.add_argument(
        "--baseline-tokens", type=int, default=16_000_000, help="tokens per bare call, per measurement of (a)"
    )
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--batch", type=int, default=16, help="global batch size (sequences)")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, *rest = args.child
        if kind == "baseline":
            result = measure_baseline(args.home, rest[0], args.baseline_tokens)
        elif kind == "stream":
            result = measure_stream(
                args.home,
                rest[0],
                rest[1],
                args.tokens,
                args.warmup_tokens,
                args.seq_len,
                args.batch,
                args.shuffle_window,
            )
        else:
            result = measure_seek(args.home, rest[0], args.seq_len, args.batch, args.shuffle_window)
        print(json.dumps(result))
        return 0

    home = args.home or Path(tempfile.mkdtemp(prefix="loader-bench-"))
    print(f"working in {home} on {os.cpu_count()} CPU(s)", flush=True)
    setup = prepare(home, args.small_mb, args.large_mb, args.vocab)
    print(f"corpus bytes {setup['bytes']}; tokenizer trained in {setup['tokenizer_train_s']:.1f}s", flush=True)
    common = ["--tokens", str(args.tokens), "--warmup-tokens", str(args.warmup_tokens)]
    common += ["--baseline-tokens", str(args.baseline_tokens)]
    common += ["--seq-len", str(args.seq_len), "--batch", str(args.batch)]
    common += ["--shuffle-window", str(args.shuffle_window)]
    baselines, streams = [], []
    for corpus in ("small", "large"):
        # (a) before and after the loaders on the same table, so a drift of the machine's speed
        # during the run shows, and the ratios use the mean of the two.
        baselines.append(run_child(home, common, "baseline", corpus))
        print(f"(a) {corpus}: {_rates(baselines[-1])}", flush=True)
        for backend in ("local", "ray"):
            streams.append(run_child(home, common, "stream", backend, corpus))
            print(f"(b) {backend} {corpus}: {streams[-1]['tokens_per_s']:,.0f} tokens/s", flush=True)
        baselines.append(run_child(home, common, "baseline", corpus))
        print(f"(a) {corpus}, again: {_rates(baselines[-1])}", flush=True)
    seeks = [run_child(home, common, "seek", backend) for backend in ("local", "ray")]
    results = {
        "setup": setup,
        "settings": {k: str(v) for k, v in vars(args).items()} | {"cpus": os.cpu_count()},
        "baselines": baselines,
        "streams": streams,
        "seeks": seeks,
    }
    (home / "results.json").write_text(json.dumps(results, indent=2))
    print()
    print(report(results))
    return 0


def _rates(baseline: dict) -> str:
    return ", ".join(f"{call} {baseline[call]['tokens_per_s']:,.0f}" for call in BASELINE_CALLS) + " tokens/s"


def baseline_means(results: dict) -> dict[str, dict[str, float]]:
    """Per table and bare call, the mean tokens/s of (a)'s measurements (before and after the loaders)."""
    runs: dict[str, dict[str, list[float]]] = {}
    for b in results["baselines"]:
        for call in BASELINE_CALLS:
            runs.setdefault(b["corpus"], {}).setdefault(call, []).append(b[call]["tokens_per_s"])
    return {corpus: {call: sum(r) / len(r) for call, r in calls.items()} for corpus, calls in runs.items()}


def report(results: dict) -> str:
    means = baseline_means(results)
    lines = ["(a) bare calls over each table's documents in memory: before / after the loaders, mean"]
    for corpus, calls in means.items():
        for call, mean in calls.items():
            runs = " / ".join(f"{b[call]['tokens_per_s']:,.0f}" for b in results["baselines"] if b["corpus"] == corpus)
            lines.append(f"  {corpus:6} {call:18} {runs:>24}   mean {mean:>10,.0f} tokens/s")
    lines += [
        "",
        "(b) loader end to end from Iceberg: steady (after the warm-up tokens), and during the warm-up;",
        "    ratios to the same table's (a) mean: encode_batch (the goal's baseline), then encode_batch_fast",
        f"{'backend':8} {'table':6} {'tokens/s':>12} {'vs (a)':>7} {'vs fast':>7} {'warm-up':>12} {'vs (a)':>7} "
        f"{'1st batch':>10} {'RSS MB':>8} {'workers MB':>11}",
    ]
    for s in results["streams"]:
        base = means[s["corpus"]]
        warm = s["warmup_tokens_per_s"] or 0.0
        lines.append(
            f"{s['backend']:8} {s['corpus']:6} {s['tokens_per_s']:>12,.0f} "
            f"{s['tokens_per_s'] / base['encode_batch']:>7.2f} {s['tokens_per_s'] / base['encode_batch_fast']:>7.2f} "
            f"{warm:>12,.0f} {warm / base['encode_batch']:>7.2f} {s['first_batch_s']:>9.1f}s {s['peak_rss_mb']:>8.0f} "
            f"{s['peak_ray_workers_rss_mb']:>11.0f}"
        )
    ray_init = [s["ray_init_s"] for s in results["streams"] if s["backend"] == "ray"]
    lines += [f"(ray.init took {max(ray_init):.1f}s before construction, not counted above)", ""]
    lines.append("(c) load_state_dict, and load + first batch, at global sequence 0 and 10^6")
    for s in results["seeks"]:
        a, b = s["sequence_0"], s["sequence_1e6"]
        lines.append(
            f"{s['backend']:8} load {a['load_state_dict_s'] * 1e3:.1f} ms vs {b['load_state_dict_s'] * 1e3:.1f} ms; "
            f"with first batch {a['load_and_first_batch_s']:.2f}s vs {b['load_and_first_batch_s']:.2f}s "
            f"(ratio {b['load_and_first_batch_s'] / a['load_and_first_batch_s']:.2f}); state {s['state_bytes']} bytes"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
