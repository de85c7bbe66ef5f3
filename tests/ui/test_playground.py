"""The playground on real checkpoints (made without training, tests/ui/made_checkpoints.py):
completions side by side and reproducible, model output shown as text, the models cached by
checkpoint identity, and generation in a bounded pool that leaves the other pages answering."""

from __future__ import annotations

import asyncio
import html
import re
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
import torch
from starlette.exceptions import HTTPException
from starlette.testclient import TestClient

import evals.generate
from evals.checkpoint_model import load_checkpoint
from tests.decisions import hand_made_checkpoint
from tests.ui.built_factory import Server
from tests.ui.inspected import MARKUP_PROMPT, MARKUP_TEXTS
from tests.ui.made_checkpoints import save_checkpoint, seeded_model
from ui.app import create_app
from ui.generation import GenerationPool, GenerationSettings, ModelCache
from ui.sources import Sources


@pytest.fixture(scope="module")
def client(made_home):
    # On the CPU wherever the tests run: the completions are compared with generate's on the CPU.
    return TestClient(create_app(Sources(None, [made_home.home]), GenerationSettings(device="cpu")))


def token(page: str) -> str:
    return re.search(r'<input type="hidden" name="csrf" value="([^"]*)">', page).group(1)


def completions(page: str) -> dict[str, str]:
    found = re.findall(
        r'<div class="completion" data-checkpoint="([^"]*)">.*?<pre class="text">(.*?)</pre>', page, re.S
    )
    return {key: html.unescape(text) for key, text in found}


def ask(client: TestClient, **fields) -> httpx.Response:
    form = {"max_new_tokens": "24", "temperature": "0", "top_p": "1", "seed": "", **fields}
    return client.post("/playground", data={"csrf": token(client.get("/playground").text), **form})


def test_model_output_and_the_prompt_are_shown_as_text(client):
    page = ask(client, prompt=MARKUP_PROMPT, ckpt=["runs/markup@1", "runs/markup@2", "runs/tiny@1"])
    assert page.status_code == 200, page.text[-500:]
    written = completions(page.text)
    assert list(written) == ["runs/markup@1", "runs/markup@2", "runs/tiny@1"]  # side by side, in the order asked
    assert (written["runs/markup@1"], written["runs/markup@2"]) == MARKUP_TEXTS  # "<script>", "<b>hi"
    main = page.text.split("<main>")[1]
    assert "<script" not in main and "<b>" not in main
    assert "&lt;script&gt;</pre>" in main and "&lt;b&gt;hi</pre>" in main
    assert html.unescape(re.search(r'<pre id="prompt">(.*?)</pre>', main, re.S).group(1)) == MARKUP_PROMPT
    assert html.escape(MARKUP_PROMPT, quote=False) in main.split("</textarea>")[0]  # the form, filled in
    assert "default-src 'none'" in page.headers["content-security-policy"]


def test_a_prompt_typed_in_a_browser_is_generated_with_the_line_breaks_the_model_knows(client):
    """Browsers send a textarea's line breaks as CRLF (the HTML form encoding)."""
    typed = {"ckpt": ["runs/tiny@2", "runs/tiny@1"], "max_new_tokens": "12"}
    from_browser = completions(ask(client, prompt="def add(a, b):\r\n    return", **typed).text)
    assert from_browser == completions(ask(client, prompt="def add(a, b):\n    return", **typed).text)
    assert from_browser != completions(ask(client, prompt="def add(a, b):  return", **typed).text)


def test_the_same_form_gives_the_same_completions_and_its_permalink_refills_it(client, made_home):
    sampled = {"prompt": "def add(a, b):", "ckpt": ["runs/tiny@2", "runs/tiny@1"], "temperature": "0.9"}
    first = ask(client, **sampled, top_p="0.95", seed="4242")
    assert first.status_code == 200, first.text[-500:]
    assert re.search(r'<td class="mono" id="seed">4242</td>', first.text)
    assert completions(ask(client, **sampled, top_p="0.95", seed="4242").text) == completions(first.text)
    assert completions(ask(client, **sampled, top_p="0.95", seed="4243").text) != completions(first.text)
    # What the page shows is the checkpoint's own generation with those parameters.
    loaded = load_checkpoint(made_home.tiny[1], torch.device("cpu"))
    ((expected,),) = evals.generate.generate(
        loaded.model,
        loaded.tokenizer,
        ["def add(a, b):"],
        samples=1,
        max_new_tokens=24,
        device=loaded.device,
        temperature=0.9,
        top_p=0.95,
        seeds=4242,
    )
    assert completions(first.text)["runs/tiny@2"] == expected

    (permalink,) = re.findall(r'<a id="permalink" href="([^"]*)">', first.text)
    query = parse_qs(urlsplit(html.unescape(permalink)).query)
    assert query["ckpt"] == ["runs/tiny@2", "runs/tiny@1"] and query["seed"] == ["4242"]
    assert query["prompt"] == ["def add(a, b):"] and query["temperature"] == ["0.9"] and query["top_p"] == ["0.95"]
    form = client.get(html.unescape(permalink))
    assert form.status_code == 200 and 'id="completions"' not in form.text  # a link shows the form, never generates
    chosen = re.findall(r'<option value="([^"]*)" selected>', form.text)
    assert chosen == ["runs/tiny@2", "runs/tiny@1"] and 'name="seed" type="number" min="0" value="4242"' in form.text

    unseeded = ask(client, **sampled)  # no seed given: one is drawn, and shown
    seed = re.search(r'<td class="mono" id="seed">(\d+)</td>', unseeded.text).group(1)
    assert completions(ask(client, **sampled, seed=seed).text) == completions(unseeded.text)


def test_a_playground_form_it_cannot_run_says_what_to_change(client, made_home):
    hand_made_checkpoint(made_home.home / "runs" / "empty", made_home.manifest, 3)
    for fields, status, says in (
        ({"prompt": "hi", "ckpt": ["runs/nope@1"]}, 404, "no complete checkpoint 'runs/nope@1'"),
        ({"prompt": "hi", "ckpt": ["runs/tiny"]}, 400, "<run>@<step>"),
        ({"prompt": "hi", "ckpt": ["runs/tiny@²"]}, 400, "<run>@<step>"),
        ({"prompt": "hi", "ckpt": ["runs/empty@3"]}, 400, "holds no model weights"),
        ({"prompt": "hi", "ckpt": ["runs/tiny@1"] * 5}, 400, "choose 1 to 4 checkpoints"),
        ({"prompt": "hi", "ckpt": []}, 400, "choose 1 to 4 checkpoints"),
        ({"prompt": "", "ckpt": ["runs/tiny@1"]}, 400, "type a prompt"),
        ({"prompt": "hi", "ckpt": ["runs/tiny@1"], "temperature": "warm"}, 400, "temperature must be a number"),
        ({"prompt": "hi", "ckpt": ["runs/tiny@1"], "temperature": "nan"}, 400, "temperature must be a number"),
        ({"prompt": "hi", "ckpt": ["runs/tiny@1"], "max_new_tokens": "0"}, 400, "max new tokens must be 1 to 512"),
        ({"prompt": "hi", "ckpt": ["runs/tiny@1"], "top_p": "0"}, 400, "top-p must be above 0"),
        ({"prompt": "hi", "ckpt": ["runs/tiny@1"], "seed": "-1"}, 400, "the seed must be 0 to 2^63-1"),
        ({"prompt": "p" * 4001, "ckpt": ["runs/tiny@1"]}, 413, "at most 4,000 are taken"),
    ):
        refused = ask(client, **fields)
        assert refused.status_code == status and says in html.unescape(refused.text), (fields, refused.text[-300:])
        assert "default-src 'none'" in refused.headers["content-security-policy"]
    shutil.rmtree(made_home.home / "runs" / "empty")


def test_loaded_models_are_kept_by_checkpoint_identity_the_most_recent_few(made_home):
    one, two = made_home.tiny
    cache = ModelCache(GenerationSettings(models=1, device="cpu"))
    first = cache.get(one)
    assert cache.get(one) is first
    second = cache.get(two)
    assert cache.identities() == [second.identity] and cache.get(one) is not first  # evicted, loaded again
    both = ModelCache(GenerationSettings(models=2, device="cpu"))
    kept = both.get(one), both.get(two)
    assert (both.get(one), both.get(two)) == kept

    run = made_home.home / "runs" / "resaved"
    spec = load_checkpoint(one, torch.device("cpu")).tokenizer
    before = both.get(save_checkpoint(run, 1, seeded_model(spec, 11), made_home.manifest, made_home.tokenizer))
    shutil.rmtree(run)  # the same step saved again, with other weights: another checkpoint
    after = both.get(save_checkpoint(run, 1, seeded_model(spec, 12), made_home.manifest, made_home.tokenizer))
    assert after.identity != before.identity
    assert not torch.equal(after.model.output.weight, before.model.output.weight)
    shutil.rmtree(run)


def test_the_pool_refuses_past_its_bound_and_stops_waiting_at_its_timeout():
    async def scenario() -> None:
        release = threading.Event()
        pool = GenerationPool(GenerationSettings(workers=1, queue=1, timeout_s=30))
        running = asyncio.ensure_future(pool.run(release.wait))
        waiting = asyncio.ensure_future(pool.run(release.wait))
        await asyncio.sleep(0.2)
        with pytest.raises(HTTPException) as busy:
            await pool.run(release.wait)
        assert busy.value.status_code == 503 and "busy" in busy.value.detail
        release.set()
        assert await running and await waiting
        assert await pool.run(lambda: 7) == 7  # the slots are free again

        held = threading.Event()
        quick = GenerationPool(GenerationSettings(workers=1, queue=0, timeout_s=0.2))
        with pytest.raises(HTTPException) as late:
            await quick.run(held.wait)
        assert late.value.status_code == 504 and "--generate-timeout" in late.value.detail
        with pytest.raises(HTTPException) as still:  # the worker still runs it: its slot is still taken
            await quick.run(lambda: 7)
        assert still.value.status_code == 503
        held.set()
        await asyncio.sleep(0.2)
        assert await quick.run(lambda: 7) == 7

    # A loop of its own in a thread of its own: Playwright's sync API (the browser tests, earlier in
    # the same session) leaves an event loop running in this thread, where asyncio.run refuses to start.
    with ThreadPoolExecutor(1) as thread:
        thread.submit(asyncio.run, scenario()).result()


@pytest.mark.engine
def test_a_long_generation_leaves_the_other_pages_answering(made_home, monkeypatch):
    entered, release = threading.Event(), threading.Event()
    real = evals.generate.generate

    def held(*args, **kwargs):  # the real generation, once the test lets it start
        entered.set()
        assert release.wait(120)
        return real(*args, **kwargs)

    monkeypatch.setattr(evals.generate, "generate", held)
    settings = GenerationSettings(workers=1, queue=0, timeout_s=120, device="cpu")
    with Server(made_home.home, settings) as url, httpx.Client(base_url=url, timeout=30) as browser:
        form = {"prompt": MARKUP_PROMPT, "ckpt": "runs/markup@1", "max_new_tokens": "16", "temperature": "0"}
        form["csrf"] = token(browser.get("/playground").text)
        answers = {}
        slow = threading.Thread(target=lambda: answers.setdefault("slow", browser.post("/playground", data=form)))
        slow.start()
        assert entered.wait(60)
        for page in ("/", "/samples", "/samples/compare", "/ratings", "/ratings/leaderboard", "/runs/runs/tiny"):
            started = time.monotonic()
            response = browser.get(page)
            assert response.status_code == 200, (page, response.text[-300:])
            assert time.monotonic() - started < 10, page
        busy = browser.post("/playground", data=form)
        assert busy.status_code == 503 and "the playground is busy" in busy.text
        assert "default-src 'none'" in busy.headers["content-security-policy"]
        assert slow.is_alive()
        release.set()
        slow.join(60)
    assert answers["slow"].status_code == 200
    assert completions(answers["slow"].text) == {"runs/markup@1": MARKUP_TEXTS[0]}
