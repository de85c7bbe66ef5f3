"""Blind ratings: two checkpoints' completions of one task, shown as A and B, and a person's pick.

``GET /ratings`` draws a task of the suite that has samples at two or more checkpoints, two of those
checkpoints and one sample of each, in random order. The page names neither: its form carries
only the pair's random id, and which sample is A and which B stays in the server (``OpenPairs``,
the newest ``OPEN_PAIRS``). ``POST /ratings`` (CSRF token, size limits: ``ui/forms.py``) records
the pick with the rater's name in ``evals.ratings`` (``evals/ratings.py``), then reveals the two
checkpoints and shows the next pair. ``/ratings/leaderboard`` fits Bradley–Terry scores with
95% intervals (``evals/bradley_terry.py``) per checkpoint.
"""

from __future__ import annotations

import random
import secrets
import threading
import unicodedata
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from cachetools.keys import hashkey
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse
from pyiceberg.expressions import EqualTo, In
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

from evals.bradley_terry import Standing, leaderboard
from evals.ratings import RATINGS_TABLE, WINNERS, games, rating_row, read_ratings, record_rating
from ui import samples
from ui.cache import memo
from ui.checkpoints import Labels
from ui.forms import Csrf, limited, read_form
from ui.sources import BadRequest, NotFound, Sources

RATER_MAX_CHARS = 80
OPEN_PAIRS = 1000


@dataclass(frozen=True)
class Pair:
    pair_id: str  # becomes the rating's id
    suite: str
    task_id: str
    a: tuple[str, str]  # (checkpoint, sample_id), shown as A
    b: tuple[str, str]


class OpenPairs:
    """The pairs shown and not yet rated, the newest ``OPEN_PAIRS``: a pair is rated at most once."""

    def __init__(self) -> None:
        self._pairs: OrderedDict[str, Pair] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, pair: Pair) -> None:
        with self._lock:
            self._pairs[pair.pair_id] = pair
            while len(self._pairs) > OPEN_PAIRS:
                self._pairs.popitem(last=False)

    def take(self, pair_id: str) -> Pair | None:
        with self._lock:
            return self._pairs.pop(pair_id, None)


def draw_pair(summary: samples.Summary, suite: str, rng: random.Random) -> Pair | None:
    """A task with samples at two or more checkpoints, two of them in random order, a sample of each."""
    tasks = summary.by_task.get(suite, {})
    eligible = _ratable_tasks(summary, suite)
    if not eligible:
        return None
    task = rng.choice(eligible)
    first, second = rng.sample(sorted(tasks[task]), 2)
    a, b = (first, rng.choice(tasks[task][first])), (second, rng.choice(tasks[task][second]))
    return Pair("r" + secrets.token_hex(12), suite, task, a, b)


def _ratable_tasks(summary: samples.Summary, suite: str) -> list[str]:
    return sorted(task for task, at in summary.by_task.get(suite, {}).items() if len(at) >= 2)


def register(app: FastAPI, sources: Sources, page: Callable[..., HTMLResponse], csrf: Csrf) -> None:
    open_pairs = OpenPairs()
    rng = random.SystemRandom()  # a rater cannot guess which side is which
    recording = threading.Lock()  # one commit at a time from this server: no retries against itself

    def rate_page(request: Request, suite: str, rater: str = "", revealed: dict | None = None) -> HTMLResponse:
        table = samples.samples_table(sources)
        summary = samples.summary(table) if table is not None else None
        suites = summary.suites if summary else []
        suite = suite or next((s for s in suites if _ratable_tasks(summary, s)), "")
        if suite and suite not in suites:
            raise NotFound(f"no samples of suite {suite!r} in evals.samples")
        pair = draw_pair(summary, suite, rng) if suite else None
        shown = {}
        if pair is not None:
            open_pairs.add(pair)
            where = EqualTo("suite", pair.suite) & In("checkpoint", [pair.a[0], pair.b[0]])
            shown = samples.texts(table, [pair.a[1], pair.b[1]], where)
        token, fresh = csrf.token(request)
        response = page(
            "rate.html",
            suites=suites,
            suite=suite,
            pair=pair,
            a=shown.get(pair.a[1]) if pair else None,
            b=shown.get(pair.b[1]) if pair else None,
            rater=rater,
            revealed=revealed,
            csrf_token=token,
            limits={"rater": RATER_MAX_CHARS},
        )
        return csrf.set_cookie(response, fresh)

    def vote(request: Request, form: dict[str, str]) -> HTMLResponse:
        csrf.check(request, form)
        rater = limited(form, "rater", RATER_MAX_CHARS, "rater's name")
        if not rater.strip():
            raise BadRequest("type your name: each rating records who gave it")
        if any(unicodedata.category(c).startswith("C") for c in rater):
            # Kept as typed otherwise; a NUL, a line break or a right-to-left override would garble
            # every listing of evals.ratings that prints the name.
            raise BadRequest("the rater's name holds a control or formatting character: type it as plain text")
        winner = form.get("winner", "")
        if winner not in WINNERS:
            raise BadRequest(f"pick A, B or a tie (winner {', '.join(WINNERS)}), got {winner[:20]!r}")
        pair = open_pairs.take(form.get("pair", ""))
        if pair is None:
            raise HTTPException(
                409,
                "this pair is no longer open: it was rated already, or the server restarted since it was "
                "shown. Rate the next one.",
            )
        row = rating_row(pair.pair_id, rater, pair.suite, pair.task_id, pair.a, pair.b, winner)
        with recording:
            record_rating(sources.catalog, row)
        labels = Labels(sources)
        revealed = {"row": row, "a": labels(pair.a[0]), "b": labels(pair.b[0])}
        return rate_page(request, pair.suite, rater, revealed)

    @app.get("/ratings", response_class=HTMLResponse)
    def ratings_page(request: Request, suite: str = ""):
        return rate_page(request, suite)

    @app.post("/ratings", response_class=HTMLResponse)
    async def rate(request: Request):
        form = await read_form(request)
        return await run_in_threadpool(vote, request, form)

    @app.get("/ratings/leaderboard", response_class=HTMLResponse)
    def leaderboard_page(suite: str = ""):
        table = sources.optional_table(RATINGS_TABLE)
        suites, count, standings = _standings(sources, table.metadata_location if table else None, suite)
        return page(
            "leaderboard.html",
            suite=suite,
            suites=suites,
            ratings=count,
            standings=standings,
            labels=Labels(sources),
        )


# Kept per evals.ratings' metadata file: each vote is a commit of its own (a data file and a
# manifest), so reading them all costs a file per vote, where the fit itself is cheap. A vote
# shows on the next request. (A vote landing between the location's lookup and the read keeps the
# newer state under the older key, never the older one.)
@memo(32, key=lambda sources, location, suite: hashkey(location, suite))
def _standings(sources: Sources, location: str | None, suite: str) -> tuple[list[str], int, list[Standing]]:
    """The suites rated, the number of ratings (of ``suite`` if named) and their Bradley–Terry standings."""
    everything = _ratings(sources, location)
    ratings = [r for r in everything if r["suite"] == suite] if suite else everything
    return sorted({r["suite"] for r in everything}), len(ratings), leaderboard(games(ratings))


@memo(4, key=lambda sources, location: hashkey(location))
def _ratings(sources: Sources, location: str | None) -> list[dict]:
    return read_ratings(sources.catalog) if location else []  # one row per vote people gave: small
