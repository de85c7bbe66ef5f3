"""The playground: one prompt completed by 1–4 checkpoints side by side, reproducibly.

``GET /playground`` shows the form, filled from its query (a permalink); it never generates, so
a link cannot make the server work. ``POST /playground`` (CSRF token, size limits: ``ui/forms.py``)
generates in the worker pool (``ui/generation.py``) with ``evals/generate.py``'s ``generate``:
greedy at temperature 0, else sampled with the seed shown, the same seed for every checkpoint.
The answer shows the exact parameters and a permalink to the form holding them; sending it again
gives the same completions (``generate``'s determinism).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from urllib.parse import urlencode

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

from ui.checkpoints import Checkpoint, all_checkpoints, find_checkpoints
from ui.forms import Csrf, limited, read_form_lists
from ui.generation import GenerationPool, ModelCache
from ui.sources import BadRequest, Sources

PROMPT_MAX_CHARS = 4000
MAX_NEW_TOKENS = 512
MAX_CHECKPOINTS = 4
SEED_LIMIT = 2**63  # seeds are stored as Iceberg longs (evals.samples)
DEFAULTS = {"max_new_tokens": "64", "temperature": "0", "top_p": "1"}


@dataclass(frozen=True)
class Ask:
    """What one generation is asked: everything its completions depend on."""

    prompt: str
    checkpoints: tuple[str, ...]  # "<run key>@<step>", in the order shown
    max_new_tokens: int
    temperature: float
    top_p: float
    seed: int

    def permalink(self) -> str:
        pairs = [("prompt", self.prompt), *(("ckpt", c) for c in self.checkpoints)]
        pairs += [(k, str(v)) for k, v in asdict(self).items() if k not in ("prompt", "checkpoints")]
        return "/playground?" + urlencode(pairs)


@dataclass(frozen=True)
class Completion:
    checkpoint: Checkpoint
    identity: str
    text: str
    seconds: float


def parse_ask(fields: dict[str, list[str]], *, new_seed: bool) -> Ask:
    """An ``Ask`` from form or query fields; refused with a message saying what to change."""

    def one(name: str) -> str:
        return (fields.get(name) or [DEFAULTS.get(name, "")])[0].strip()

    prompt = limited({"prompt": (fields.get("prompt") or [""])[0]}, "prompt", PROMPT_MAX_CHARS, "prompt")
    # A browser sends a textarea's line breaks as CRLF; the model was trained on the text's own LF.
    prompt = prompt.replace("\r\n", "\n").replace("\r", "\n")
    checkpoints = tuple(c for c in fields.get("ckpt", []) if c)
    if not 1 <= len(checkpoints) <= MAX_CHECKPOINTS:
        raise BadRequest(f"choose 1 to {MAX_CHECKPOINTS} checkpoints, got {len(checkpoints)}")
    seed_text = one("seed")
    if not seed_text and new_seed:
        seed_text = str(secrets.randbelow(2**31))  # shown with the result: the run can be repeated
    ask = Ask(
        prompt,
        checkpoints,
        _number(one("max_new_tokens"), int, "max new tokens"),
        _number(one("temperature"), float, "temperature"),
        _number(one("top_p"), float, "top-p"),
        _number(seed_text or "0", int, "seed"),
    )
    if not prompt:
        raise BadRequest("type a prompt")
    if not 1 <= ask.max_new_tokens <= MAX_NEW_TOKENS:
        raise BadRequest(f"max new tokens must be 1 to {MAX_NEW_TOKENS}, got {ask.max_new_tokens}")
    if not 0 <= ask.temperature <= 5:
        raise BadRequest(f"temperature must be 0 (greedy) to 5, got {ask.temperature:g}")
    if not 0 < ask.top_p <= 1:
        raise BadRequest(f"top-p must be above 0 and at most 1, got {ask.top_p:g}")
    if not 0 <= ask.seed < SEED_LIMIT:
        raise BadRequest(f"the seed must be 0 to 2^63-1, got {ask.seed}")
    return ask


def _number(text: str, kind: type, what: str):
    try:
        value = kind(text)
    except ValueError:
        raise BadRequest(f"{what} must be a number, got {text[:40]!r}") from None
    if kind is float and value != value:  # NaN compares false with every bound
        raise BadRequest(f"{what} must be a number, got {text[:40]!r}")
    return value


def complete(cache: ModelCache, ask: Ask, checkpoints: list[Checkpoint]) -> list[Completion]:
    """Each checkpoint's completion of the prompt; runs in a worker thread."""
    from evals.generate import generate  # torch: imported by the first generation, not by `factory ui`

    done = []
    for checkpoint in checkpoints:
        started = time.monotonic()
        loaded = cache.get(checkpoint.path)
        ((text,),) = generate(
            loaded.model,
            loaded.tokenizer,
            [ask.prompt],
            samples=1,
            max_new_tokens=ask.max_new_tokens,
            device=loaded.device,
            temperature=ask.temperature,
            top_p=ask.top_p,
            seeds=ask.seed,
        )
        done.append(Completion(checkpoint, loaded.identity, text, time.monotonic() - started))
    return done


def register(
    app: FastAPI, sources: Sources, page: Callable[..., HTMLResponse], csrf: Csrf, pool: GenerationPool
) -> None:
    cache = ModelCache(pool.settings)

    def form_page(request: Request, ask: dict, completions: list[Completion] | None = None, **more) -> HTMLResponse:
        token, fresh = csrf.token(request)
        response = page(
            "playground.html",
            ask=ask,
            completions=completions,
            choices=all_checkpoints(sources),
            slots=MAX_CHECKPOINTS,
            limits={"prompt": PROMPT_MAX_CHARS, "max_new_tokens": MAX_NEW_TOKENS},
            csrf_token=token,
            **more,
        )
        return csrf.set_cookie(response, fresh)

    @app.get("/playground", response_class=HTMLResponse)
    def playground_form(request: Request):
        query = {name: request.query_params.getlist(name) for name in request.query_params}
        if len(query.get("prompt", [""])[0]) > PROMPT_MAX_CHARS:
            raise HTTPException(413, f"the prompt is over {PROMPT_MAX_CHARS:,} characters, the most taken")
        ask = {name: (values[0] if values else "") for name, values in query.items() if name != "ckpt"}
        ask = {**DEFAULTS, "prompt": "", "seed": "", **ask, "checkpoints": query.get("ckpt", [])}
        return form_page(request, ask)

    @app.post("/playground", response_class=HTMLResponse)
    async def playground_run(request: Request):
        # Async, so that waiting for the pool holds no thread; what reads files runs in threads.
        fields = await read_form_lists(request)
        csrf.check(request, {k: v[0] for k, v in fields.items()})
        ask = parse_ask(fields, new_seed=True)
        checkpoints = await run_in_threadpool(find_checkpoints, sources, ask.checkpoints)
        completions = await pool.run(complete, cache, ask, checkpoints)
        shown = {**asdict(ask), "checkpoints": list(ask.checkpoints)}
        return await run_in_threadpool(form_page, request, shown, completions, permalink=ask.permalink(), ran=ask)
