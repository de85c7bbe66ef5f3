"""The inspection pages in headless Chromium, on the factory the real jobs built (its trained run
runs/tiny, steps 2 and 4) with two checkpoints that write markup (runs/markup) and eval samples of
runs/tiny added: the playground, the samples and their comparison, a blind rating, and a post
from another site refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.ui.browser import MARKS, snap
from tests.ui.built_factory import BuiltFactory, Server
from tests.ui.inspected import MARKUP_PROMPT, MARKUP_TEXTS, XSS, make_markup, sample_rows, write_samples

pytestmark = MARKS


@pytest.fixture(scope="module")
def base_url(factory: BuiltFactory):
    from pyiceberg.catalog import load_catalog

    from lakehouse.catalog import embedded_catalog_properties

    home = factory.home
    make_markup(home / "runs", home / "manifest.json", home / "tokenizer.json")
    write_samples(load_catalog("factory", **embedded_catalog_properties(home)), sample_rows(trained(factory)))
    with Server(home) as url:
        yield url


def trained(factory: BuiltFactory) -> list[Path]:
    return [factory.run_dir / "checkpoints" / f"step-{step}" for step in (2, 4)]


def assert_nothing_ran(page) -> None:
    assert page.evaluate("() => window.__xss") is None
    assert not [m for m in page.console_messages_seen if "Content Security Policy" in m or "pageerror" in m]


def test_the_playground_shows_model_output_as_text_and_reproduces_it(page, shots):
    page.goto("/")
    page.click("#inspect-links a:text-is('playground')")
    page.fill("textarea[name=prompt]", MARKUP_PROMPT)
    slots = page.locator("select[name=ckpt]")
    for slot, key in enumerate(("runs/markup@1", "runs/markup@2", "runs/tiny@4")):
        slots.nth(slot).select_option(key)
    page.fill("input[name=temperature]", "0.8")
    page.fill("input[name=seed]", "99")
    page.click("#ask button[type=submit]")
    texts = page.locator("#completions pre.text").all_inner_texts()
    assert texts[:2] == list(MARKUP_TEXTS)  # "<script>", "<b>hi": shown, as text
    assert page.locator("#completions script, #completions b, main script").count() == 0
    assert page.locator("#prompt").inner_text() == MARKUP_PROMPT
    assert page.locator("#seed").inner_text() == "99"
    assert_nothing_ran(page)
    snap(page, shots, "playground")

    page.click("#permalink")  # the form as sent; sending it again gives the same completions
    assert page.locator("textarea[name=prompt]").input_value() == MARKUP_PROMPT
    assert page.locator("input[name=seed]").input_value() == "99"
    page.click("#ask button[type=submit]")
    assert page.locator("#completions pre.text").all_inner_texts() == texts
    assert_nothing_ran(page)


def test_eval_samples_from_a_run_and_two_checkpoints_compared(page, factory, shots):
    page.goto(f"/runs/{factory.run_key}")
    page.click("#inspect-run a:text-is('eval samples of this run')")
    assert page.locator("#samples a.sample").count() == len(sample_rows(trained(factory)))
    page.select_option("select[name=verdict]", "fail")
    page.fill("input[name=task]", "HumanEval/0")
    page.click("#filter button")
    page.locator("#samples a.sample").first.click()
    assert page.locator("#completion").inner_text().startswith(XSS)  # shown, as text
    assert page.locator("#stdout").inner_text() == XSS and page.locator("#verdict").inner_text() == "fail"
    assert page.locator("main b, main img").count() == 0
    assert_nothing_ran(page)
    snap(page, shots, "sample")

    page.goto("/samples/compare")
    page.click("#pick button")  # the suite
    page.select_option("select[name=a]", label="runs/tiny step 2")
    page.select_option("select[name=b]", label="runs/tiny step 4")
    page.click("#pick button")
    changes = page.locator("#comparison tr.task td.change").all_inner_texts()
    assert changes == ["fail → pass", "fail → pass", "pass → fail", "same", "only A"]
    assert_nothing_ran(page)
    snap(page, shots, "compare")


def test_a_blind_rating_then_the_leaderboard(page, shots):
    page.goto("/ratings")
    assert "runs/tiny" not in page.locator("main").inner_text()  # neither checkpoint is named
    snap(page, shots, "rating")
    page.fill("input[name=rater]", "Ann <i>")
    page.click("button[value=b]")
    revealed = page.locator("#revealed").inner_text()
    assert "Recorded: B" in revealed and "by Ann <i>" in revealed
    assert {page.locator("#revealed-a").inner_text(), page.locator("#revealed-b").inner_text()} == {
        "runs/tiny step 2",
        "runs/tiny step 4",
    }
    assert page.locator("input[name=rater]").input_value() == "Ann <i>"  # the next pair, the name kept
    page.click("#leaderboard-link")
    players = page.locator("#standings td.player").all_inner_texts()
    assert sorted(players) == ["runs/tiny step 2", "runs/tiny step 4"]
    assert page.locator("#standings td.interval").count() == 2
    snap(page, shots, "leaderboard")


def test_a_form_posted_from_another_site_is_refused(page, base_url):
    page.goto("/ratings")  # the browser holds the UI's cookie
    page.goto("about:blank")
    page.set_content(
        f'<form method="post" action="{base_url}/ratings"><input name="pair" value="r0">'
        '<input name="rater" value="mallory"><input name="csrf" value="guess">'
        '<button name="winner" value="a">win a prize</button></form>'
    )
    with page.expect_navigation() as sent:
        page.click("button")
    assert sent.value.status == 403 and "security token" in page.locator("main").inner_text()
