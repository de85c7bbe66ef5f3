"""Credentials out of anything the factory writes or prints about a catalog's configuration.

A catalog's URI, its pyiceberg properties and the messages of errors raised while loading it can
carry a secret in several forms: URI userinfo (``user:pw@``, ``:pw@``), query parameters
(``?password=``, ``?PWD=``, ``?sas_token=``…, also percent-encoded inside another parameter, as
in ``odbc_connect``), ``KEY=value`` pairs and Python or JSON mappings (``{'token': '…'}``).
``redact`` replaces each such value with ``***`` and keeps the rest, so a manifest, a lineage
record, a log line or an error message still says which catalog it was. It works on free text,
so it also cleans an exception's message that repeats a URI.
"""

from __future__ import annotations

import re

MASK = "***"

# A key names a credential when it holds one of these (case-insensitive, anywhere in the key):
# password, passwd, pwd, secret, token, api_key, access_key, secret_key, sas_token, credential,
# auth (authorization), sig/signature (Azure SAS). Masking a harmless value by mistake costs
# nothing; missing a secret leaks it.
_KEY = r"[\w.\-]*(?:pass|pwd|secret|token|key|credential|auth|sig)[\w.\-]*"

# scheme://user:password@ (user may be empty). The password runs to the last '@' before the
# host, as SQLAlchemy and urllib read it; it may hold '/', '?' or ':'.
_USERINFO = re.compile(r"(?P<head>[A-Za-z][\w+.\-]*://[^\s:/@'\"]*):(?P<secret>[^\s@'\"]*)@")
# KEY=value in a query string, a DSN or an environment line; '=' and the separators may be
# percent-encoded when the pair sits inside another parameter's value.
_PAIR = re.compile(
    rf"(?P<head>{_KEY}(?:=|%3[dD]))(?P<secret>(?:(?!%26|%3[bB])[^\s&;#'\",}}])+)",
    re.IGNORECASE,
)
# 'KEY': 'value' or "KEY": "value" in a printed mapping or JSON.
_QUOTED = re.compile(rf"(?P<head>(?P<q>['\"]){_KEY}(?P=q)\s*:\s*(?P<v>['\"]))(?P<secret>.*?)(?P=v)", re.IGNORECASE)


def redact(text: str) -> str:
    """``text`` with every credential value it holds replaced by ``***``."""
    text = _USERINFO.sub(lambda m: f"{m['head']}:{MASK}@", text)
    text = _QUOTED.sub(lambda m: f"{m['head']}{MASK}{m['v']}", text)
    return _PAIR.sub(lambda m: f"{m['head']}{MASK}", text)
