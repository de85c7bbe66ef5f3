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

# A key names a credential when it holds one of these, in any case: password, passwd, pwd,
# secret, token, api_key, access_key, secret_key, sas_token, credential, auth(orization),
# sig(nature) (Azure SAS). Masking a harmless value by mistake costs nothing; missing one leaks it.
_SECRET_KEY = re.compile(r"pass|pwd|secret|token|key|credential|auth|sig", re.IGNORECASE)

# Every pattern starts where a run of its characters starts (the look-behinds) and has one way to
# match each run, so a long message costs linear time.
#
# scheme://user:password@ (user may be empty). The password runs to the '@' before the host, as
# SQLAlchemy and urllib read it; it may hold '/', '?' or ':'.
_USERINFO = re.compile(r"(?<![\w+.\-])(?P<head>[A-Za-z][\w+.\-]*://[^\s:/@'\"]*):[^\s@'\"]*@")
# Object-store URIs that carry keys (Hadoop's old ``s3n://KEY:SECRET@bucket``) put the access key
# id where a user name goes: masked too, as the ``s3.access-key-id`` property is.
_KEY_IS_USER = {"s3", "s3a", "s3n", "gs", "gcs", "oss"}
# KEY= in a query string, a DSN or an environment line, and the value after it; '=' and the
# separators may be percent-encoded when the pair sits inside another parameter's value.
_ASSIGN = re.compile(r"(?<![\w.\-])(?P<key>[\w.\-]+)(?:=|%3[dD])")
_VALUE = re.compile(r"(?:(?!%26|%3[bB])[^\s&;#'\",}])*")
# 'KEY': 'value' or "KEY": "value" in a printed mapping or JSON.
_QUOTED = re.compile(r"(?P<head>(?P<q>['\"])(?P<key>[\w.\-]+)(?P=q)\s*:\s*)(?P<value>'[^'\n]*'|\"[^\"\n]*\")")


def redact(text: str) -> str:
    """``text`` with every credential value it holds replaced by ``***``."""
    text = _USERINFO.sub(_userinfo, text)
    text = _QUOTED.sub(_quoted, text)
    return _mask_pairs(text)


def redact_json(value: object) -> object:
    """``value`` (JSON) with every credential its strings hold masked."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {key: redact_json(item) for key, item in value.items()}
    if isinstance(value, list):
        return [redact_json(item) for item in value]
    return value


def redact_with(text: str, uri: str | None) -> str:
    """``redact(text)``, with every piece of ``uri``'s password also masked wherever it appears.

    SQLAlchemy cuts a password that holds an unencoded '@' at that '@', and the driver's error
    then names the password's tail as the host name, where no pattern can tell it is a secret."""
    text = redact(text)
    for piece in sorted(password_pieces(uri or ""), key=len, reverse=True):
        text = text.replace(piece, MASK)
    return text


def password_pieces(uri: str) -> list[str]:
    """The password in ``uri``'s userinfo, and its parts between '@'s (3 characters or more)."""
    _scheme, found, rest = uri.partition("://")
    if not found or "@" not in rest:
        return []
    password = rest.rsplit("@", 1)[0].partition(":")[2]
    return [p for p in {password, *password.split("@")} if len(p) >= 3]


def _userinfo(match: re.Match[str]) -> str:
    scheme, _, _user = match["head"].partition("://")
    if scheme.lower() in _KEY_IS_USER:
        return f"{scheme}://{MASK}:{MASK}@"
    return f"{match['head']}:{MASK}@"


def _quoted(match: re.Match[str]) -> str:
    if not _SECRET_KEY.search(match["key"]):
        return match[0]
    quote = match["value"][0]
    return f"{match['head']}{quote}{MASK}{quote}"


def _mask_pairs(text: str) -> str:
    # Only a secret's value is consumed: the value of any other key may hold pairs itself
    # (odbc_connect=DRIVER%3D…%3BPWD%3D…), found by the same scan.
    pieces, done = [], 0
    for match in _ASSIGN.finditer(text):
        if match.start() >= done and _SECRET_KEY.search(match["key"]):
            pieces += [text[done : match.end()], MASK]
            done = _VALUE.match(text, match.end()).end()
    return "".join([*pieces, text[done:]])
