"""Blind ratings: identities hidden until the vote, the vote recorded in evals.ratings with the
rater's name as typed and nothing else of them, posts refused without their CSRF token or over the
size limits, and the leaderboard."""

from __future__ import annotations

import html
import json
import re

import pytest
from starlette.testclient import TestClient

from evals.bradley_terry import leaderboard
from evals.ratings import RATINGS_TABLE, games, rating_row, read_ratings, record_rating
from lakehouse.schemas import EVAL_RATINGS_SCHEMA
from tests.ui.inspected import SUITE
from ui.app import create_app
from ui.forms import MAX_BODY_BYTES
from ui.sources import Sources

RATER = "  Zoë <b>O'Neil</b> "  # as typed: spaces, markup and all


@pytest.fixture
def client(factory_home):
    return TestClient(create_app(Sources(None, [factory_home])))


def hidden(page: str, name: str) -> str:
    return re.search(rf'<input type="hidden" name="{name}" value="([^"]*)">', page).group(1)


def shown(page: str, side: str) -> str:
    return html.unescape(re.search(rf'<pre id="completion-{side}" class="completion">(.*?)</pre>', page, re.S).group(1))


def assert_csp(response) -> None:
    policy = response.headers["content-security-policy"]
    assert "default-src 'none'" in policy and "form-action 'self'" in policy and "frame-ancestors 'none'" in policy


def test_a_blind_rating_hides_the_checkpoints_until_the_vote(client, samples_home, catalog):
    by_id = {r["sample_id"]: r for r in samples_home.rows}
    pair = client.get(f"/ratings?suite={SUITE}")
    assert pair.status_code == 200, pair.text[-500:]
    assert_csp(pair)
    main = pair.text.split("<main>")[1]
    for checkpoint in samples_home.checkpoints:  # neither the folder, the run, nor a sample id
        assert str(checkpoint) not in main and "runs/tiny" not in main and "step 1" not in main
    assert not any(sample_id in main for sample_id in by_id)
    cookie = pair.cookies.get("factory_csrf")
    assert cookie and "samesite=strict" in pair.headers["set-cookie"].lower()
    assert "httponly" in pair.headers["set-cookie"].lower()
    completion_a, completion_b = shown(pair.text, "a"), shown(pair.text, "b")

    vote = client.post(
        "/ratings",
        data={"csrf": hidden(pair.text, "csrf"), "pair": hidden(pair.text, "pair"), "rater": RATER, "winner": "a"},
        headers={"user-agent": "agent-marker/1.0", "x-forwarded-for": "203.0.113.9"},
    )
    assert vote.status_code == 200, vote.text[-500:]
    assert_csp(vote)
    (row,) = read_ratings(catalog)
    assert row["rater"] == RATER and row["winner"] == "a" and row["suite"] == SUITE
    assert row["rating_id"] == hidden(pair.text, "pair")
    assert set(row) == {f.name for f in EVAL_RATINGS_SCHEMA.fields}
    # A and B as recorded are the completions shown as A and B.
    assert by_id[row["sample_a"]]["completion"] == completion_a and by_id[row["sample_b"]]["completion"] == completion_b
    assert by_id[row["sample_a"]]["task_id"] == by_id[row["sample_b"]]["task_id"] == row["task_id"]
    assert row["checkpoint_a"] != row["checkpoint_b"]
    assert {row["checkpoint_a"], row["checkpoint_b"]} == {str(c) for c in samples_home.checkpoints}
    # Nothing else of the rater: not in the row, not in the snapshot's summary.
    table = catalog.load_table(RATINGS_TABLE)
    summary = json.dumps(table.current_snapshot().summary.additional_properties)
    for trace in ("agent-marker", "203.0.113.9", "testclient", "Zo"):
        assert trace not in json.dumps(row, ensure_ascii=False).replace(RATER, "") and trace not in summary

    revealed = html.unescape(vote.text.split('id="revealed"')[1].split("</div>")[0])
    labels = {str(c): f"runs/tiny step {c.name[5:]}" for c in samples_home.checkpoints}
    assert f'A was <span id="revealed-a">{labels[row["checkpoint_a"]]}</span>' in revealed
    assert f'B was <span id="revealed-b">{labels[row["checkpoint_b"]]}</span>' in revealed
    assert "&lt;b&gt;O&#39;Neil&lt;/b&gt;" in vote.text and "<b>O'Neil" not in vote.text  # the name, as text
    # The next pair, the name filled in; the rated pair is closed.
    assert hidden(vote.text, "pair") != row["rating_id"]
    assert html.unescape(re.search(r'name="rater" value="([^"]*)"', vote.text).group(1)) == RATER
    again = client.post(
        "/ratings", data={"csrf": hidden(pair.text, "csrf"), "pair": row["rating_id"], "rater": "x", "winner": "b"}
    )
    assert again.status_code == 409 and "no longer open" in again.text
    assert len(read_ratings(catalog)) == 1


def test_a_post_without_its_token_or_over_the_limits_is_refused(client, samples_home, catalog):
    pair = client.get("/ratings").text
    form = {"csrf": hidden(pair, "csrf"), "pair": hidden(pair, "pair"), "rater": "ann", "winner": "tie"}
    stranger = TestClient(client.app)  # another browser: its own cookie
    stranger.get("/ratings")
    refusals = [
        (client.post("/ratings", data={**form, "csrf": ""}), 403, "security token"),
        (client.post("/ratings", data={**form, "csrf": "0" * 64}), 403, "security token"),
        (stranger.post("/ratings", data=form), 403, "security token"),  # a token that is not its cookie's
        (TestClient(client.app).post("/ratings", data=form), 403, "security token"),  # no cookie at all
        (client.post("/ratings", data={**form, "rater": "n" * 81}), 413, "at most 80"),
        (client.post("/ratings", data={**form, "rater": "   "}), 400, "type your name"),
        (client.post("/ratings", data={**form, "rater": "ann\r\nbob"}), 400, "control or formatting character"),
        (client.post("/ratings", data={**form, "rater": "ann\u202egnp.exe"}), 400, "control or formatting"),
        (client.post("/ratings", data={**form, "winner": "c"}), 400, "pick A, B or a tie"),
        (client.post("/ratings", data={**form, "padding": "p" * MAX_BODY_BYTES}), 413, "at most 65,536"),
        (client.post("/ratings", json=form), 400, "application/x-www-form-urlencoded"),
        (client.post("/playground", data={"prompt": "hi", "ckpt": "runs/tiny@1"}), 403, "security token"),
        (client.get("/playground?prompt=" + "p" * 4001), 413, "over 4,000 characters"),
    ]
    for response, status, says in refusals:
        assert response.status_code == status and says in html.unescape(response.text), (status, says)
        assert_csp(response)
    assert read_ratings(catalog) == []
    assert client.post("/ratings", data=form).status_code == 200  # the same form, sent right
    assert [r["winner"] for r in read_ratings(catalog)] == ["tie"]


def test_the_leaderboard_ranks_checkpoints_with_intervals(client, samples_home, catalog):
    first, second = (str(c) for c in samples_home.checkpoints)
    sample = samples_home.rows[0]["sample_id"]
    outcomes = [(second, first, "a")] * 4 + [(first, second, "b")] * 3 + [(first, second, "a"), (first, second, "tie")]
    for k, (a, b, winner) in enumerate(outcomes):
        record_rating(catalog, rating_row(f"r{k}", "ann", SUITE, "HumanEval/0", (a, sample), (b, sample), winner))
    again = rating_row("r0", "ann", SUITE, "HumanEval/0", (second, sample), (first, sample), "a")
    assert record_rating(catalog, again) is None  # a vote sent twice is recorded once
    assert len(read_ratings(catalog)) == len(outcomes)
    page = client.get("/ratings/leaderboard")
    assert page.status_code == 200
    rows = re.findall(
        r'<td class="player">([^<]*)</td><td class="score">(\d+)</td>\s*<td class="interval">(\d+) to (\d+)</td>',
        page.text,
    )
    expected = leaderboard(games(read_ratings(catalog)))
    assert [r[0] for r in rows] == ["runs/tiny step 2", "runs/tiny step 1"]
    assert [tuple(int(v) for v in r[1:]) for r in rows] == [
        (round(s.score), round(s.low), round(s.high)) for s in expected
    ]
    assert "from 9 blind ratings" in page.text
    assert client.get("/ratings/leaderboard").text == page.text
    assert "no ratings yet" in client.get("/ratings/leaderboard?suite=other").text
