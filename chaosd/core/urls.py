"""URLs that may hold a credential: masked wherever they are shown, and a dependency's upstream parsed.

The lowest layer that knows of passwords in URLs: the config checks a dependency's upstream with
:func:`parse_upstream`, the proxy connects to it, and every message that names a server masks it with
:func:`redact_url`.
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass, field
from typing import Literal

__all__ = ["MASK", "URL_PREFIX", "Upstream", "parse_upstream", "redact_url"]

MASK = "***"
# Query parameters that carry a credential (redis-py, for one, passes ``?password=`` to AUTH).
_SECRET_PARAM = re.compile(r"pass|secret|token|auth|key|credential", re.IGNORECASE)
URL_PREFIX = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


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
        scheme = url.partition("://")[0] if URL_PREFIX.match(url) else ""
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


@dataclass(frozen=True, slots=True)
class Upstream:
    """Where a dependency really is. The password never shows in its repr; :meth:`display` masks it."""

    scheme: Literal["http", "https", "tcp"]
    host: str
    port: int
    path: str  # http(s): the base path without a trailing "/" ("" for none); tcp: ""
    username: str | None
    password: str | None = field(repr=False)

    def display(self) -> str:
        """The URL with the password replaced by ``***``: what messages and logs may show."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        user = ""
        if self.username is not None or self.password is not None:
            user = urllib.parse.quote(self.username or "", safe="")
            if self.password is not None:
                user += ":" + urllib.parse.quote(self.password, safe="")
            user += "@"
        return redact_url(f"{self.scheme}://{user}{host}:{self.port}{self.path}")


def parse_upstream(url: str) -> Upstream:
    """``http://host:port/base``, ``https://…`` or ``tcp://host:port``. A ValueError's one-line message names the
    problem and never holds the password (nor any part of the URL a password could be mistaken for)."""
    head, sep, _ = url.partition("://")
    scheme = head.lower()
    if not sep:
        raise ValueError('upstream must be a URL such as "http://host:port" or "tcp://host:port" (no "://" in it)')
    if scheme not in ("http", "https", "tcp"):
        shown = scheme if scheme.isascii() and scheme.replace("+", "").replace("-", "").isalnum() else "?"
        raise ValueError(f'scheme must be http, https or tcp (got "{shown}")')
    if any(c.isspace() for c in url):
        raise ValueError("upstream must not contain whitespace")
    parts = urllib.parse.urlsplit(url)
    if "@" in url.partition("://")[2].replace(parts.netloc, "", 1):
        raise ValueError("upstream: percent-encode the user part (a /, ? or # in a password ends the host early)")
    try:
        port = parts.port
    except ValueError:
        raise ValueError("port must be 1-65535") from None
    host = parts.hostname or ""
    if not host:
        raise ValueError("tcp upstream needs host:port" if scheme == "tcp" else f"{scheme} upstream needs a host")
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        raise ValueError("upstream takes no query or fragment")
    if scheme == "tcp":
        if port is None:
            raise ValueError("tcp upstream needs host:port")
        if parts.path not in ("", "/"):
            raise ValueError("tcp upstream takes no path")
    if port is None:
        port = 443 if scheme == "https" else 80
    if not 1 <= port <= 65535:
        raise ValueError("port must be 1-65535")
    username = None if parts.username is None else urllib.parse.unquote(parts.username)
    password = None if parts.password is None else urllib.parse.unquote(parts.password)
    path = "" if scheme == "tcp" else parts.path.rstrip("/")
    return Upstream(scheme, host, port, path, username, password)  # type: ignore[arg-type]  # checked above
