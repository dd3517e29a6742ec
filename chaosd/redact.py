"""Secrets out of what is stored, served, logged or reported: passwords in URLs, and the settings as a whole.

The API token is a ``SecretStr`` and already dumps as ``"**********"``. A URL such as ``backend.url =
"redis://:PASSWORD@host:6379/0"`` is a plain string the code that connects must read as it is, so it is
redacted here, at the edges that write it anywhere: the stored run config (and so ``GET /api/v1/runs/{id}``)
and the messages that name the server.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Mapping
from typing import Any

from chaosd.config import Settings

__all__ = ["MASK", "redact_url", "redacted", "redacted_settings"]

MASK = "***"
# Query parameters that carry a credential (redis-py, for one, passes ``?password=`` to AUTH).
_SECRET_PARAM = re.compile(r"pass|secret|token|auth|key|credential", re.IGNORECASE)
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def redact_url(url: str) -> str:
    """``url`` with its password replaced by ``***`` (``redis://user:***@host:6379/0``).

    A user part without a password (``redis://SECRET@host``, some clients' way of giving a token) is masked
    whole, as are the values of query parameters named like a credential. A URL that cannot be parsed keeps
    only its scheme: better an unhelpful message than a leaked password.
    """
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a port that is not a number
        # An unescaped "/", "?" or "#" in a password ends the host part early: the rest is no path.
        if "@" in url.partition("://")[2].replace(parts.netloc, "", 1):
            raise ValueError("userinfo past the host part")
    except ValueError:
        scheme = url.partition("://")[0] if _URL.match(url) else ""
        return f"{scheme}://{MASK}" if scheme else MASK
    netloc = parts.netloc
    userinfo, at, hostport = netloc.rpartition("@")
    if at:
        user, colon, _ = userinfo.partition(":")
        netloc = f"{user}:{MASK}@{hostport}" if colon else f"{MASK}@{hostport}"
    query = parts.query
    if query:
        pairs = urllib.parse.parse_qsl(query, keep_blank_values=True)
        if any(_SECRET_PARAM.search(k) for k, _ in pairs):
            query = urllib.parse.urlencode([(k, MASK if _SECRET_PARAM.search(k) else v) for k, v in pairs], safe="*")
    if netloc == parts.netloc and query == parts.query:
        return url
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def redacted(value: Any) -> Any:
    """A JSON-like value with every string that is a URL redacted (:func:`redact_url`), at any depth."""
    if isinstance(value, str):
        return redact_url(value) if _URL.match(value) else value
    if isinstance(value, Mapping):
        return {k: redacted(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redacted(v) for v in value]
    return value


def redacted_settings(settings: Settings) -> dict[str, Any]:
    """The settings as a JSON-able dict, safe to store and serve: the token masked, URLs without passwords."""
    data: dict[str, Any] = redacted(settings.model_dump(mode="json"))
    return data
