"""Database URLs as users write them, and as they may be shown.

``postgres://`` is what most hosts put in ``DATABASE_URL``; SQLAlchemy knows only
``postgresql://`` (which it drives with psycopg 3), so the store reads the one as the
other. A URL in a message or a log never shows its password: it is masked as ``***``,
also in a URL SQLAlchemy cannot parse (a bad port), which a user is told about.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

__all__ = ["masked", "normalized", "without_passwords"]

#: scheme://user:password@ — the password up to the authority's last '@' (one written
#: unencoded, ``s3cr@t``, is masked whole)
_USERINFO = re.compile(r"^(?P<head>[\w+]+://[^:/@]*):(?P<password>[^/?#]*)@")
#: a password given as a query parameter (?password=...), as libpq also takes it
_QUERY_PASSWORD = re.compile(r"(?P<head>[?&]password=)(?P<password>[^&]*)", re.IGNORECASE)


def normalized(url: str) -> str:
    """``url`` with a ``postgres`` scheme (with or without a driver) read as ``postgresql``."""
    scheme, sep, rest = url.partition("://")
    dialect, plus, driver = scheme.partition("+")
    if sep and dialect == "postgres":
        return f"postgresql{plus}{driver}://{rest}"
    return url


def masked(url: str) -> str:
    """``url`` with any password in it replaced by ``***``."""
    url = _USERINFO.sub(lambda m: f"{m['head']}:***@", url, count=1)
    return _QUERY_PASSWORD.sub(lambda m: f"{m['head']}***", url)


def without_passwords(text: str, url: str) -> str:
    """``text`` (a driver's message about ``url``, say) with ``url``'s passwords masked,
    as written and as decoded (``%40`` is ``@``)."""
    text = text.replace(url, masked(url))
    found = [m["password"] for m in (_USERINFO.match(url), *_QUERY_PASSWORD.finditer(url)) if m is not None]
    # a shorter one is too likely to be part of ordinary words: masking it would garble the message
    for password in sorted({v for p in found for v in (p, unquote(p)) if len(v) >= 4}, key=len, reverse=True):
        text = text.replace(password, "***")
    return text
