"""The inspection pages, registered on the app in one call: the playground, eval samples and the
comparison of two checkpoints, blind ratings with their leaderboard, and RL runs' rollouts."""

from __future__ import annotations

from collections.abc import Callable

from fastapi import FastAPI
from fastapi.responses import HTMLResponse

from ui import playground, ratings, rollout_pages, sample_pages
from ui.forms import Csrf
from ui.generation import GenerationPool, GenerationSettings
from ui.sources import Sources


def register(app: FastAPI, sources: Sources, page: Callable[..., HTMLResponse], settings: GenerationSettings) -> None:
    csrf = Csrf()
    playground.register(app, sources, page, csrf, GenerationPool(settings))
    sample_pages.register(app, sources, page)
    ratings.register(app, sources, page, csrf)
    rollout_pages.register(app, sources, page)
