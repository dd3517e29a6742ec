"""The standard ``OTEL_*`` variables chaosd's traces obey, checked once at start.

The SDK would warn about a value it cannot read and carry on with its default; chaosd refuses it instead, naming
the variable, as it does any other setting. Values that may hold a secret (headers, endpoints) are never quoted.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from opentelemetry.propagators.textmap import TextMapPropagator
from opentelemetry.sdk.resources import OTELResourceDetector, Resource

from chaosd.core.errors import ConfigError
from chaosd.core.version import __version__

__all__ = ["GRPC_EXTRA", "OtelEnv", "queue_limits", "read_otel_env", "resource", "textmap"]

Protocol = Literal["http/protobuf", "grpc"]
GRPC_EXTRA = "chaosd[otlp-grpc]"
QUEUE = 2048  # spans waiting for export, as the SDK's OTEL_BSP_MAX_QUEUE_SIZE default

_SAMPLERS = (
    "always_on",
    "always_off",
    "traceidratio",
    "parentbased_always_on",
    "parentbased_always_off",
    "parentbased_traceidratio",
)
_POSITIVE_INTS = (
    "OTEL_BSP_MAX_QUEUE_SIZE",
    "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
    "OTEL_BSP_SCHEDULE_DELAY",
    "OTEL_BSP_EXPORT_TIMEOUT",
)
_TIMEOUTS = ("OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT")
_HEADERS = ("OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS")
_ENDPOINTS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
# One entry of a headers variable as the exporter parses it (name=value, the value URL-encoded or not).
_HEADER = re.compile(
    r"[ \t]*[\x21\x23-\x27\x2a\x2b\x2d\x2e\x30-\x39\x41-\x5a\x5e-\x7a\x7c\x7e]+[ \t]*="
    r"[ \t]*[\x20\x21\x23-\x2b\x2d-\x3a\x3c-\x5b\x5d-\x7e]*[ \t]*"
)


@dataclass(frozen=True, slots=True)
class OtelEnv:
    """What the variables ask of chaosd's traces: whether to export at all, over which protocol, how many spans
    may wait. The rest (endpoint, headers, timeout, sampler, batch timing, limits) the SDK reads itself."""

    exporting: bool
    protocol: Protocol
    protocol_from: str  # the variable that chose the protocol, for the message when gRPC is missing
    queue: int
    batch: int  # spans per export, at most ``queue``


def _shown(value: str) -> str:
    return repr(value[:40])


def _problems(env: Mapping[str, str]) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []

    def bad(name: str, message: str) -> None:
        problems.append((name, message))

    if (disabled := env.get("OTEL_SDK_DISABLED", "").strip().lower()) not in ("", "true", "false"):
        bad("OTEL_SDK_DISABLED", f"true or false (got {_shown(disabled)})")
    if (exporter := env.get("OTEL_TRACES_EXPORTER", "").strip().lower()) not in ("", "otlp", "none"):
        bad("OTEL_TRACES_EXPORTER", f"otlp or none: chaosd exports traces over OTLP only (got {_shown(exporter)})")
    for name in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        if (protocol := env.get(name, "").strip()) not in ("", "http/protobuf", "grpc"):
            bad(name, f"http/protobuf or grpc (got {_shown(protocol)})")
    sampler = env.get("OTEL_TRACES_SAMPLER", "").strip().lower()
    if sampler and sampler not in _SAMPLERS:
        bad("OTEL_TRACES_SAMPLER", f"one of {', '.join(_SAMPLERS)} (got {_shown(sampler)})")
    if sampler.endswith("traceidratio") and "OTEL_TRACES_SAMPLER_ARG" in env:
        arg = env["OTEL_TRACES_SAMPLER_ARG"]
        try:
            ratio = float(arg)
        except ValueError:
            ratio = -1.0
        if not 0.0 <= ratio <= 1.0:
            bad("OTEL_TRACES_SAMPLER_ARG", f"a ratio from 0 to 1 (got {_shown(arg)})")
    for name in _POSITIVE_INTS:
        if name in env and not (env[name].strip().isdigit() and int(env[name]) > 0):
            bad(name, f"a whole number > 0 (got {_shown(env[name])})")
    for name in _TIMEOUTS:
        try:
            ok = name not in env or float(env[name]) > 0
        except ValueError:
            ok = False
        if not ok:
            bad(name, f"seconds > 0, as the Python exporter reads it (got {_shown(env[name])})")
    for name in _HEADERS:
        entries = [e for e in env.get(name, "").split(",") if e.strip()]
        for i, entry in enumerate(entries):
            if not _HEADER.fullmatch(entry):
                bad(name, f"entry {i + 1} is not name=value (the value is not shown: it may be a secret)")
    off = disabled == "true" or exporter == "none"  # then where it would have sent is no matter
    for name in _ENDPOINTS:
        if not off and name in env and env[name].strip() and not _is_http_url(env[name]):
            bad(name, "an http:// or https:// URL with a host (the value is not shown: it may hold a secret)")
    return problems


def _is_http_url(text: str) -> bool:
    try:
        url = urllib.parse.urlsplit(text.strip())
        return url.scheme in ("http", "https") and bool(url.hostname)
    except ValueError:
        return False


def read_otel_env(env: Mapping[str, str]) -> OtelEnv:
    """The variables read and checked; a ConfigError naming each variable that cannot be used. With no endpoint
    nothing is exported and no other variable is read: those set for other programs are no matter."""
    endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    if not (endpoint and endpoint.strip()):
        return OtelEnv(False, "http/protobuf", "OTEL_EXPORTER_OTLP_PROTOCOL", QUEUE, 512)  # unused
    problems = _problems(env)
    if problems:
        raise ConfigError([("environment", name, message) for name, message in problems])
    exporting = (
        env.get("OTEL_SDK_DISABLED", "").strip().lower() != "true"
        and env.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() != "none"
    )
    protocol: Protocol = "http/protobuf"
    protocol_from = "OTEL_EXPORTER_OTLP_PROTOCOL"
    for name in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        if value := env.get(name, "").strip():
            protocol = "grpc" if value == "grpc" else "http/protobuf"
            protocol_from = name
            break
    return OtelEnv(exporting, protocol, protocol_from, *queue_limits(env))


def queue_limits(env: Mapping[str, str]) -> tuple[int, int]:
    """Spans that may wait for export (``OTEL_BSP_MAX_QUEUE_SIZE``) and spans per export (at most as many)."""
    problems = _problems({k: v for k, v in env.items() if k.startswith("OTEL_BSP_")})
    if problems:
        raise ConfigError([("environment", name, message) for name, message in problems])
    queue = int(env.get("OTEL_BSP_MAX_QUEUE_SIZE", QUEUE))
    batch = int(env.get("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", min(512, queue)))
    if batch > queue:
        raise ConfigError(
            [("environment", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", f"at most OTEL_BSP_MAX_QUEUE_SIZE ({queue})")]
        )
    return queue, batch


def resource(defaults: Mapping[str, str | int]) -> Resource:
    """The process's resource: the SDK's own attributes, then chaosd's (``service.name`` chaosd, ``service.version``
    the package's, ``defaults``), then this process's ``OTEL_RESOURCE_ATTRIBUTES`` and ``OTEL_SERVICE_NAME``, each
    winning over the ones before."""
    ours = Resource({"service.name": "chaosd", "service.version": __version__, **defaults})
    return Resource.create({}).merge(ours).merge(OTELResourceDetector().detect())


def textmap() -> TextMapPropagator:
    """The propagators ``OTEL_PROPAGATORS`` names (W3C trace context and baggage unless it says otherwise)."""
    try:
        from opentelemetry import propagate  # noqa: PLC0415 - reads OTEL_PROPAGATORS when imported
    except Exception as exc:  # an unknown name there fails the import itself
        message = f"names a propagator that is not installed ({type(exc).__name__}); tracecontext and baggage are"
        raise ConfigError([("environment", "OTEL_PROPAGATORS", message)]) from None
    return propagate.get_global_textmap()
