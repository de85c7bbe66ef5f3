"""The UI's forms that post: a CSRF token on each, and the body read within a size limit.

CSRF: the signed double-submit cookie. A page holding a form sets a random cookie (``SameSite=Strict``,
``HttpOnly``) if the browser has none, and writes ``HMAC(server secret, cookie)`` into a hidden
field; a post is taken only when its field is the HMAC of the cookie it came with. Another site
can make a browser post, but it can neither read the page (no CORS, and the cookie is not sent
on cross-site requests) nor compute the HMAC without the server's secret, which is made anew
each time the server starts (a form from before a restart is refused; reloading it mends that).

Bodies are read here rather than by FastAPI's ``Form`` (python-multipart): the limit applies
while reading, before anything is parsed, and a declared ``Content-Length`` over it is refused
without reading at all.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from urllib.parse import parse_qs

from fastapi import Request
from fastapi.responses import Response
from starlette.exceptions import HTTPException

COOKIE = "factory_csrf"
FIELD = "csrf"
MAX_BODY_BYTES = 64 * 1024  # a prompt at its limit, in any script, percent-encoded, fits
MAX_FIELDS = 32


class Csrf:
    def __init__(self) -> None:
        self._secret = secrets.token_bytes(32)

    def token(self, request: Request) -> tuple[str, str | None]:
        """The form's token for this browser, and the cookie to set (None if it has one)."""
        cookie = request.cookies.get(COOKIE)
        fresh = None
        if not cookie or len(cookie) > 64:
            cookie = fresh = secrets.token_urlsafe(24)
        return self._sign(cookie), fresh

    def set_cookie(self, response: Response, fresh: str | None) -> Response:
        if fresh is not None:
            response.set_cookie(COOKIE, fresh, httponly=True, samesite="strict", path="/")
        return response

    def check(self, request: Request, form: dict[str, str]) -> None:
        """Refuse (403) a post whose token is missing or is not this browser's."""
        cookie, sent = request.cookies.get(COOKIE, ""), form.get(FIELD, "")
        if not cookie or not sent or not hmac.compare_digest(self._sign(cookie), sent):
            raise HTTPException(
                403, "this form's security token is missing or out of date: reload the page and send it again"
            )

    def _sign(self, cookie: str) -> str:
        return hmac.new(self._secret, cookie.encode(), hashlib.sha256).hexdigest()


async def read_form(request: Request, max_bytes: int = MAX_BODY_BYTES) -> dict[str, str]:
    """The posted ``application/x-www-form-urlencoded`` fields, each name's first value (a field
    that may repeat is read with ``read_form_lists``)."""
    return {name: values[0] for name, values in (await read_form_lists(request, max_bytes)).items()}


async def read_form_lists(request: Request, max_bytes: int = MAX_BODY_BYTES) -> dict[str, list[str]]:
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise HTTPException(400, f"send the form as application/x-www-form-urlencoded, not {kind or 'nothing'}")
    declared = request.headers.get("content-length", "")
    if declared.isascii() and declared.isdigit() and int(declared) > max_bytes:
        raise HTTPException(413, f"the form is {int(declared):,} bytes; at most {max_bytes:,} are taken")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > max_bytes:
            raise HTTPException(413, f"the form is over {max_bytes:,} bytes, the most taken")
    try:
        return parse_qs(body.decode("utf-8"), keep_blank_values=True, max_num_fields=MAX_FIELDS)
    except (UnicodeDecodeError, ValueError) as exc:
        raise HTTPException(400, f"the form could not be read: {exc}") from None


def limited(form: dict[str, str], name: str, limit: int, what: str) -> str:
    """Field ``name``, refused (413) when longer than ``limit`` characters."""
    value = form.get(name, "")
    if len(value) > limit:
        raise HTTPException(413, f"the {what} is {len(value):,} characters; at most {limit:,} are taken")
    return value
