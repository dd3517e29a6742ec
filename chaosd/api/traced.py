"""The server span of an API request: a child of the caller's trace when the request carries a W3C ``traceparent``,
named and described by HTTP's stable semantic conventions, and current while the request is handled, so that a log
line written meanwhile carries its trace and span ids.

What a caller sent that may be private is never recorded: no query string, no header but ``User-Agent``.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Middleware
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.util.types import AttributeValue

from chaosd.exporters.otel_env import textmap
from chaosd.exporters.tracing import HTTP_METHODS, Tracing

__all__ = ["UNTRACED", "request_attributes", "traced"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

UNTRACED = ("/metrics", "/healthz", "/readyz", "/api/v1/events")  # scrapes, health checks, the event stream
_TEXT = 256  # characters kept of a path, a host name or a user agent: what a caller sent, bounded


def _route(request: web.Request) -> str | None:
    """The matched route's template (``/api/v1/faults/{id}``), or None when nothing matched."""
    resource = request.match_info.route.resource
    if resource is None or request.match_info.http_exception is not None:
        return None
    return resource.canonical


def _server(request: web.Request) -> tuple[str | None, int | None]:
    """The server's address and port as the caller named them (the Host header), else the listening socket's."""
    host = request.headers.get("Host", "")
    name: str | None = None
    port: int | None = None
    try:
        split = urllib.parse.urlsplit("//" + host)
        name, port = split.hostname, split.port
    except ValueError:  # a Host header that is no host: the socket's own address stands in
        pass
    sockname = request.transport.get_extra_info("sockname") if request.transport is not None else None
    if isinstance(sockname, tuple) and len(sockname) >= 2:
        name = name or str(sockname[0])
        port = port or int(sockname[1])
    return (name[:_TEXT] if name else None), port


def request_attributes(request: web.Request, route: str | None) -> dict[str, AttributeValue]:
    """The stable HTTP server attributes known when the request arrives."""
    method = request.method
    attributes: dict[str, AttributeValue] = {
        "http.request.method": method if method in HTTP_METHODS else "_OTHER",
        "url.path": request.path[:_TEXT],
        "url.scheme": request.scheme,
        "network.protocol.version": f"{request.version.major}.{request.version.minor}",
    }
    if method not in HTTP_METHODS:
        attributes["http.request.method_original"] = method[:_TEXT]
    if route is not None:
        attributes["http.route"] = route
    address, port = _server(request)
    if address:
        attributes["server.address"] = address
    if port:
        attributes["server.port"] = port
    if request.remote:
        attributes["client.address"] = request.remote
        attributes["network.peer.address"] = request.remote
    peer = request.transport.get_extra_info("peername") if request.transport is not None else None
    if isinstance(peer, tuple) and len(peer) >= 2 and isinstance(peer[1], int):
        attributes["network.peer.port"] = peer[1]
    if agent := request.headers.get("User-Agent"):
        attributes["user_agent.original"] = agent[:_TEXT]
    return attributes


def traced(tracing: Tracing) -> Middleware:
    """A server span per API request (not for :data:`UNTRACED`), current around the handlers inside it."""
    propagator = textmap()

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in UNTRACED:
            return await handler(request)
        route = _route(request)
        method = request.method if request.method in HTTP_METHODS else "HTTP"
        span = tracing.tracer.start_span(
            f"{method} {route}" if route else method,
            context=propagator.extract(request.headers),  # a malformed traceparent: no parent, a new trace
            kind=SpanKind.SERVER,
            start_time=tracing.now_ns(),
            attributes=request_attributes(request, route),
        )
        status: int | None = None
        try:
            with trace.use_span(span, record_exception=False, set_status_on_exception=False):
                response = await handler(request)
            status = response.status
            return response
        except web.HTTPException as exc:  # a redirect raised past the error middleware
            status = exc.status
            raise
        except Exception as exc:
            span.set_attribute("error.type", type(exc).__qualname__)
            span.set_status(Status(StatusCode.ERROR))
            raise
        finally:
            if status is not None:
                span.set_attribute("http.response.status_code", status)
                if status >= 500:  # a 4xx is the caller's error, not the server's (the conventions' rule)
                    span.set_attribute("error.type", str(status))
                    span.set_status(Status(StatusCode.ERROR))
            span.end(end_time=tracing.now_ns())

    return middleware
