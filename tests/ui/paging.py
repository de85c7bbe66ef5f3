"""Following a list page's "next" links to its end, as a reader would."""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from urllib.parse import parse_qs, urlsplit


def page_through(client, url: str, listed: Callable[[str], list[str]], kept: dict[str, str]) -> list[str]:
    """What ``listed`` finds on each page from ``url`` on; every "next" link keeps the ``kept`` filters."""
    seen = []
    while url:
        page = client.get(url)
        assert page.status_code == 200, page.text[-300:]
        seen += listed(page.text)
        found = re.search(r'<a id="next" href="([^"]*)">', page.text)
        url = html.unescape(found.group(1)) if found else None
        if url:
            query = parse_qs(urlsplit(url).query)
            assert {key: query[key] for key in kept} == {key: [value] for key, value in kept.items()}
    return seen
