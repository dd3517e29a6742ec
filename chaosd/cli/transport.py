"""How a client command reaches the daemon: its address, its token, and ``Client``, the synchronous stdlib HTTP
against docs/api.md; every failure is a ``ClientError`` carrying the exit code scripts use (:mod:`chaosd.cli.exits`).
"""

from __future__ import annotations

import argparse
import http.client
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeAlias

from chaosd.cli.exits import EXIT_REJECTED, EXIT_SERVER, EXIT_UNREACHABLE, EXIT_USAGE
from chaosd.core.errors import ChaosdError
from chaosd.core.version import __version__
from chaosd.views.wire import is_loopback

__all__ = [
    "ADDRESS_ORDER",
    "DEFAULT_ADDR",
    "UNREACHABLE_HINT",
    "Client",
    "ClientError",
    "Command",
    "Out",
    "Subcommands",
    "daemon_address",
    "environment_token",
    "read_token",
]

DEFAULT_ADDR = "http://127.0.0.1:8686"
ADDRESS_ORDER = f"first of: --addr, --host/--port, $CHAOSD_URL, {DEFAULT_ADDR}"
UNREACHABLE_HINT = "give the daemon's address with --addr URL (or --host/--port) or set CHAOSD_URL"

Out = Callable[[str], None]  # where a command prints a line (stdout or stderr, or a test's list)


class ClientError(ChaosdError):
    """A client command failed; ``code`` is the process exit code, ``message`` says what and where. A refusal by
    the daemon also carries its HTTP ``status`` and ``detail`` (``field: message``)."""

    def __init__(self, code: int, message: str, *, status: int | None = None, detail: str = "") -> None:
        self.code = code
        self.message = message
        self.status = status
        self.detail = detail
        super().__init__(message)


class Client:
    """One daemon address and its token; ``request`` returns the decoded answer or raises ``ClientError``."""

    def __init__(
        self, addr: str, token: str | None, timeout: float = 10.0, *, source: str = "--addr", hint: str = ""
    ) -> None:
        """``source`` names where ``addr`` came from (in a refusal of it, and as ``(from …)`` when unreachable);
        ``hint`` says how to give another address when this one cannot be reached."""
        self.base, host = _base_url(addr, source)
        self.token = token or None
        self.timeout = timeout
        self._origin = "" if source == "--addr" or not source else f" ({_ORIGINS.get(source, f'from {source}')})"
        self._hint = hint
        # A proxy from the environment must not intercept a daemon on this machine.
        handlers = [urllib.request.ProxyHandler({})] if is_loopback(host) else []
        self._opener = urllib.request.build_opener(*handlers)

    def request(
        self,
        method: str,
        path: str,
        body: object = None,
        *,
        content_type: str = "application/json",
        raw: bytes | None = None,
        timeout: float | None = None,
    ) -> object:
        """Send ``body`` as JSON (or ``raw`` bytes as ``content_type``); JSON answers are decoded, others are text
        (None for an empty answer)."""
        data = raw if raw is not None else None if body is None else json.dumps(body, allow_nan=False).encode()
        headers = {"Accept": "application/json", "User-Agent": f"chaosd/{__version__}"}
        if data is not None or method not in ("GET", "HEAD"):
            headers["Content-Type"] = content_type  # a change declares it even with no body (docs/security.md)
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        req = urllib.request.Request(self.base + path, data=data, headers=headers, method=method)
        try:
            with self._opener.open(req, timeout=self.timeout if timeout is None else timeout) as resp:
                payload: bytes = resp.read()
                kind = resp.headers.get_content_type()
        except urllib.error.HTTPError as exc:
            raise self._refusal(method, path, exc) from None
        except (OSError, http.client.HTTPException) as exc:  # URLError is an OSError
            raise ClientError(EXIT_UNREACHABLE, self._unreachable(exc)) from None
        if not payload:
            return None
        if kind != "application/json":
            return payload.decode("utf-8", "replace")
        try:
            return json.loads(payload)
        except ValueError:
            raise ClientError(EXIT_SERVER, f"chaosd at {self.base}: {method} {path} answered invalid JSON") from None

    def _refusal(self, method: str, path: str, exc: urllib.error.HTTPError) -> ClientError:
        try:
            detail = _error_detail(exc.read()) or str(exc.reason)
        except OSError:
            detail = str(exc.reason)
        if 400 <= exc.code < 500:
            hint = " (pass --token or set CHAOSD_API__TOKEN)" if exc.code == 401 and not self.token else ""
            return ClientError(EXIT_REJECTED, f"rejected ({exc.code}): {detail}{hint}", status=exc.code, detail=detail)
        message = f"chaosd at {self.base} failed on {method} {path} ({exc.code}): {detail}"
        return ClientError(EXIT_SERVER, message, status=exc.code, detail=detail)

    def _unreachable(self, exc: BaseException) -> str:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        where = self.base + self._origin
        hint = f"; {self._hint}" if self._hint else ""
        if isinstance(reason, TimeoutError):
            return f"no answer from chaosd at {where} within {self.timeout:g} s{hint}"
        if isinstance(reason, ConnectionRefusedError):
            return f"cannot reach chaosd at {where}: connection refused (is the daemon running?){hint}"
        if isinstance(reason, http.client.HTTPException):
            return f"cannot talk to chaosd at {where}: not an HTTP answer ({type(reason).__name__}){hint}"
        text = reason.strerror if isinstance(reason, OSError) and reason.strerror else str(reason)
        return f"cannot reach chaosd at {where}: {text}{hint}"


# Where an address came from, as the unreachable message says it ("--addr" says nothing: the user just typed it).
_ORIGINS = {"--host/--port": "from --host/--port", "default": "the default address"}


def _base_url(addr: str, source: str = "--addr") -> tuple[str, str]:
    text = addr.strip()
    if "://" not in text:
        text = "http://" + text
    parts = urllib.parse.urlsplit(text)
    host = parts.hostname
    try:
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        host = None
    if parts.scheme not in ("http", "https") or not host or parts.query or parts.fragment:
        raise ClientError(EXIT_USAGE, f"{source}: not a daemon address: {addr!r} (use host:port or http://host:port)")
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", "")), host


def daemon_address(addr: str | None, host: str | None, port: str | None, environ: Mapping[str, str]) -> tuple[str, str]:
    """The daemon's address and where it came from: ``addr`` (``--addr``), else ``host``/``port`` (either may be
    left out: the default's is used), else ``$CHAOSD_URL`` (or the older ``$CHAOSD_ADDR``), else the default.

    Raises ``ClientError`` (exit 2) naming ``--host`` or ``--port`` when one is not usable, even beside ``--addr``.
    """
    given = None
    if host is not None or port is not None:
        default = urllib.parse.urlsplit(DEFAULT_ADDR)
        name = default.hostname if host is None else host.strip()
        if not name or any(c in name for c in "/?#@ "):
            raise ClientError(EXIT_USAGE, f"--host: not a host name or address: {host!r} (a URL goes in --addr)")
        name = name.removeprefix("[").removesuffix("]")
        if ":" in name:  # an IPv6 address
            name = f"[{name}]"
        given = f"http://{name}:{default.port if port is None else _port_number(port)}"
    if addr:
        return addr, "--addr"
    if given is not None:
        return given, "--host/--port"
    for variable in ("CHAOSD_URL", "CHAOSD_ADDR"):
        if environ.get(variable):
            return environ[variable], variable
    return DEFAULT_ADDR, "default"


def _port_number(text: str) -> int:
    try:
        number = int(text.strip())
    except ValueError:
        number = 0
    if not 1 <= number <= 65535:
        raise ClientError(EXIT_USAGE, f"--port: not a port number: {text!r} (1 to 65535)")
    return number


def environment_token(environ: Mapping[str, str]) -> str | None:
    """The token from ``$CHAOSD_API__TOKEN``, ``$CHAOSD_TOKEN`` or the file ``$CHAOSD_API__TOKEN_FILE`` names;
    None when none is set. Raises ``ClientError`` (exit 2) when that file cannot be read."""
    token = environ.get("CHAOSD_API__TOKEN") or environ.get("CHAOSD_TOKEN")
    if token:
        return token
    path = environ.get("CHAOSD_API__TOKEN_FILE")
    return read_token(path, "CHAOSD_API__TOKEN_FILE") if path else None


def read_token(path: str, source: str) -> str | None:
    """The token in the file ``path`` (None when it is empty); ``source`` names the flag or variable that gave it."""
    try:
        return Path(path).read_text().strip() or None
    except (OSError, UnicodeDecodeError) as exc:
        why = getattr(exc, "strerror", None) or exc
        raise ClientError(EXIT_USAGE, f"{source}: cannot read {path!r} ({why})") from None


def _error_detail(body: bytes) -> str:
    """``field: message`` from the API's error body; else the start of whatever text came back."""
    try:
        error = json.loads(body)["error"]
        field, message = error.get("field"), error["message"]
    except (ValueError, KeyError, TypeError, AttributeError):
        return body.decode("utf-8", "replace").strip()[:200]
    return f"{field}: {message}" if field else str(message)


# Where a client command registers its parser (and is given the parent holding the daemon's address and token).
Subcommands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"  # not subscriptable at run time
# A client command: it talks to the daemon through the client, prints through ``out`` and ``err``, and returns the
# process's exit code (it never exits itself).
Command = Callable[[Client, argparse.Namespace, Out, Out], int]
