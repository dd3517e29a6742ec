"""The exposition formats of ``/metrics``: which one a scraper asks for, rendering a part of a body in it, the
exemplars OpenMetrics carries, and a gzip body joined from parts compressed apart (the cached ones once)."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterator, Sequence
from typing import Literal, cast

from prometheus_client import CONTENT_TYPE_PLAIN_0_0_4, generate_latest
from prometheus_client.core import Metric
from prometheus_client.openmetrics import exposition as openmetrics
from prometheus_client.registry import Collector
from prometheus_client.samples import Exemplar

__all__ = [
    "CONTENT_TYPES",
    "EOF",
    "Format",
    "accepts_gzip",
    "deflated",
    "gzip_joined",
    "negotiate",
    "render",
    "with_exemplars",
]

Format = Literal["text", "openmetrics"]
CONTENT_TYPES: dict[Format, str] = {"text": CONTENT_TYPE_PLAIN_0_0_4, "openmetrics": openmetrics.CONTENT_TYPE_LATEST}
EOF = b"# EOF\n"  # OpenMetrics' last line: a body is rendered in parts, and only the whole ends with it
# A gzip member's header: deflate, no name, no time, unknown system (RFC 1952).
# The OpenMetrics renderer, typed here (the library's is not).
_openmetrics = cast(Callable[[Collector], bytes], openmetrics.generate_latest)
_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"


def _media(item: str) -> tuple[str, dict[str, str]]:
    kind, *params = (part.strip() for part in item.split(";"))
    pairs = (p.split("=", 1) for p in params if "=" in p)
    return kind.lower(), {k.strip().lower(): v.strip().strip('"') for k, v in pairs}


def _q(params: dict[str, str]) -> float:
    try:
        return float(params.get("q", "1"))
    except ValueError:
        return 0.0


def negotiate(accept: str) -> Format:
    """OpenMetrics 1.0 when ``accept`` names ``application/openmetrics-text`` (version 1.0.0 or none) with a
    preference at least that of the text format; otherwise the text format 0.0.4, as for no header at all."""
    om = text = 0.0
    for item in accept.split(","):
        kind, params = _media(item)
        if kind == "application/openmetrics-text" and params.get("version", "1.0.0") == "1.0.0":
            om = max(om, _q(params))
        elif kind in ("text/plain", "text/*", "*/*"):
            text = max(text, _q(params))
    return "openmetrics" if om > 0 and om >= text else "text"


def accepts_gzip(accept_encoding: str) -> bool:
    """Whether ``Accept-Encoding`` allows gzip (named, or ``*``, with a preference above 0)."""
    for item in accept_encoding.split(","):
        coding, params = _media(item)
        if coding in ("gzip", "x-gzip", "*") and _q(params) > 0:
            return True
    return False


class _Listed(Collector):
    def __init__(self, metrics: Callable[[], Iterator[Metric]]) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        return self._metrics()


def render(metrics: Callable[[], Iterator[Metric]], fmt: Format) -> bytes:
    """Some families in ``fmt``, as a part of a body: in OpenMetrics without its ``# EOF`` (the body's end adds
    it once)."""
    if fmt == "text":
        return generate_latest(_Listed(metrics))
    body: bytes = _openmetrics(_Listed(metrics))
    return body.removesuffix(EOF)


def with_exemplars(metric: Metric, exemplars: Callable[[Metric, dict[str, str]], Exemplar | None]) -> Metric:
    """A histogram family with ``exemplars(metric, labels)`` on its bucket samples (None: no exemplar there)."""
    copy = Metric(metric.name, metric.documentation, metric.type, metric.unit)
    for sample in metric.samples:
        marked = (
            sample._replace(exemplar=exemplars(metric, sample.labels)) if sample.name.endswith("_bucket") else sample
        )
        copy.samples.append(marked)
    return copy


def deflated(data: bytes, *, last: bool) -> bytes:
    """``data`` as raw deflate blocks that another part's can follow (a sync flush), or that end the stream."""
    compressor = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    return compressor.compress(data) + compressor.flush(zlib.Z_FINISH if last else zlib.Z_SYNC_FLUSH)


def gzip_joined(parts: Sequence[tuple[bytes, bytes]]) -> bytes:
    """One gzip member of the parts' concatenation, from each part's raw bytes and its :func:`deflated` (all but the
    last flushed, the last ending the stream): only the checksum reads the raw bytes again, nothing is compressed."""
    crc = 0
    size = 0
    for raw, _ in parts:
        crc = zlib.crc32(raw, crc)
        size += len(raw)
    trailer = struct.pack("<II", crc, size & 0xFFFFFFFF)
    return _GZIP_HEADER + b"".join(packed for _, packed in parts) + trailer
