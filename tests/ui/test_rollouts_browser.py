"""The rollouts pages in headless Chromium, over a hand-made RL home (tests/ui/rl_home.py): from an
RL checkpoint's page to its run's rollouts, filtered, to one rollout whose completion holds markup
(shown as text, never run), and back to the checkpoint the run started from."""

from __future__ import annotations

import pytest

from tests.ui.browser import MARKS, snap
from tests.ui.built_factory import Server
from tests.ui.inspected import XSS
from tests.ui.rl_home import PROMPTS, make_rl_home

pytestmark = MARKS


@pytest.fixture(scope="module")
def base_url(tmp_path_factory):
    from lakehouse.catalog import load_catalog

    home = tmp_path_factory.mktemp("rl-home")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("FACTORY_HOME", str(home))
        env.delenv("FACTORY_CATALOG", raising=False)
        make_rl_home(home, load_catalog())
        with Server(home) as url:
            yield url


def test_from_an_rl_checkpoint_to_a_rollout_and_back_to_its_start(page, shots):
    page.goto("/runs/runs/rl/checkpoints/2")
    assert page.locator("#rl-tasks").inner_text().startswith("rl.tasks@")
    page.click("#rl-rollouts")
    assert page.locator("#rollouts a.rollout").count() == 2 + 2 * 2 * 3  # held-out at step 0, 2 steps of 2 × 3
    page.select_option("select[name=outcome]", "partial")
    page.fill("input[name=step]", "2")
    page.fill("input[name=task]", "t-add")
    page.click("#filter button")
    assert page.locator("#rollouts .outcome").all_inner_texts() == ["partial"]
    page.locator("#rollouts a.rollout").click()
    assert page.locator("#completion").inner_text() == f"    return {XSS} # train 2 t-add 1\n"
    assert page.locator("#output").inner_text() == f"{XSS} output of t-add 1"
    assert page.locator("#prompt").inner_text() == PROMPTS["t-add"]
    assert page.locator("main script, main b, main img").count() == 0
    assert page.evaluate("() => window.__xss") is None
    assert not [m for m in page.console_messages_seen if "pageerror" in m]
    snap(page, shots, "rollout")

    page.click("#run-link")
    page.goto(page.url + "/checkpoints/2")
    page.click("#rl-start")
    assert page.locator("h1").inner_text().startswith("Checkpoint step 2 of runs/tiny")


def test_the_nav_leads_to_the_rollouts(page):
    page.goto("/")
    page.click("header a:text-is('rollouts')")
    assert page.locator("#count").inner_text().startswith("16 rollouts")
