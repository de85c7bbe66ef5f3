"""What the loader reports: Prometheus metrics and a periodic log line.

The metrics live in prometheus-client's default registry (the trainer's ``start_http_server``
or any exporter serves them), labelled by mixture component where it matters. Rates
(tokens/s, batches/s) are Prometheus' ``rate()`` of the counters; the log line prints them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from prometheus_client import Counter, Gauge

log = logging.getLogger("factory.loader")

TOKENS = Counter("factory_loader_tokens", "Tokens delivered to training (padding excluded)", ["component"])
SEQUENCES = Counter("factory_loader_sequences", "Sequences delivered to training", ["component"])
BATCHES = Counter("factory_loader_batches", "Batches (this rank's share of global batches) delivered")
WAIT = Counter("factory_loader_wait_seconds", "Seconds next(loader) was blocked waiting for readers")
NEXT = Counter("factory_loader_next_seconds", "Seconds spent inside next(loader), waiting included")
BUFFERED = Gauge("factory_loader_buffered_units", "Units read and tokenized, waiting for the packers")
TARGET = Gauge("factory_loader_target_share", "Target share of sequences per component (its weight)", ["component"])
WAITING_SINCE = Gauge(
    "factory_loader_next_started_timestamp_seconds",
    "Unix time the pending next(loader) began; 0 while training holds a batch (a stall: long ago, not 0)",
)
DELIVERED = Gauge("factory_loader_delivered_share", "Delivered share of tokens per component", ["component"])


class LoaderMetrics:
    """Counts one loader's deliveries and logs a summary every ``interval_s`` seconds."""

    def __init__(self, names: Sequence[str], weights: Sequence[float], interval_s: float, publish: bool = True) -> None:
        self.names = list(names)
        # The process's factory_loader_* series describe its training stream: a held-out loader
        # built for each evaluation (trainer/data.py) counted its batches as training data.
        self.publish = publish
        self.weights = list(weights)
        self.interval_s = interval_s
        self.tokens = [0] * len(names)
        self.sequences = [0] * len(names)
        self.batches = 0
        self.wait_s = 0.0
        self.buffered = 0
        self._started = self._logged_at = time.monotonic()
        self._logged = (0, 0, 0.0)
        for name, weight in zip(self.names, self.weights, strict=True):
            if publish:
                TARGET.labels(name).set(weight)

    def record(
        self, components: Sequence[int], real_tokens: Sequence[int], wait_s: float, next_s: float, buffered: int
    ) -> None:
        for c, n in zip(components, real_tokens, strict=True):
            self.tokens[c] += n
            self.sequences[c] += 1
        self.batches += 1
        self.wait_s += wait_s
        self.buffered = buffered
        if self.publish:
            self._publish(components, real_tokens, wait_s, next_s)
        now = time.monotonic()
        if self.interval_s and now - self._logged_at >= self.interval_s:
            log.info(self.summary(now))
            self._logged_at, self._logged = now, (sum(self.tokens), self.batches, self.wait_s)

    def _publish(self, components: Sequence[int], real_tokens: Sequence[int], wait_s: float, next_s: float) -> None:
        for c, n in zip(components, real_tokens, strict=True):
            TOKENS.labels(self.names[c]).inc(n)
            SEQUENCES.labels(self.names[c]).inc()
        BATCHES.inc()
        WAIT.inc(wait_s)
        NEXT.inc(next_s)
        BUFFERED.set(self.buffered)
        total = sum(self.tokens) or 1
        for name, n in zip(self.names, self.tokens, strict=True):
            DELIVERED.labels(name).set(n / total)

    def summary(self, now: float | None = None) -> str:
        """Rates since the last line, the share of time spent waiting, and shares vs targets."""
        now = now or time.monotonic()
        span = max(now - self._logged_at, 1e-9)
        tokens, batches, waited = self._logged
        total = sum(self.tokens) or 1
        shares = ", ".join(
            f"{n} {t / total:.3f}/{w:.3f}" for n, t, w in zip(self.names, self.tokens, self.weights, strict=True)
        )
        return (
            f"loader: {(sum(self.tokens) - tokens) / span:,.0f} tokens/s, {(self.batches - batches) / span:.2f} "
            f"batches/s, waited {100 * (self.wait_s - waited) / span:.0f}% of the time, "
            f"{self.buffered} unit(s) buffered; token share delivered/target: {shares}"
        )

    def as_dict(self) -> dict[str, object]:
        total = sum(self.tokens) or 1
        return {
            "batches": self.batches,
            "wait_s": self.wait_s,
            "elapsed_s": time.monotonic() - self._started,
            "tokens": dict(zip(self.names, self.tokens, strict=True)),
            "sequences": dict(zip(self.names, self.sequences, strict=True)),
            "token_share": {n: t / total for n, t in zip(self.names, self.tokens, strict=True)},
            "target_share": dict(zip(self.names, self.weights, strict=True)),
        }


# How often the wait for a first batch is reported.
FIRST_BATCH_REPORT_S = 5.0


@contextmanager
def first_batch_progress(buffered: Callable[[], int], every_s: float | None = None) -> Iterator[None]:
    """Log every few seconds while the first batch is awaited: how long, and how much is read."""
    every_s = FIRST_BATCH_REPORT_S if every_s is None else every_s
    done, began = threading.Event(), time.monotonic()

    def report() -> None:
        while not done.wait(every_s):
            log.info(
                "loader: waiting for the first batch for %.0fs; %d unit(s) read and tokenized so far",
                time.monotonic() - began,
                buffered(),
            )

    thread = threading.Thread(target=report, name="first-batch-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
