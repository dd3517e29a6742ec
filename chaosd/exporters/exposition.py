"""The exposition formats of ``/metrics``: which one a scraper asks for, OpenMetrics made from the text format with
the exemplars it carries, and a gzip body joined from parts compressed apart (the cached ones once)."""

from __future__ import annotations

import re
import struct
import zlib
from collections.abc import Callable, Collection, Sequence
from typing import Literal, cast

from prometheus_client import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.openmetrics import exposition as openmetrics_exposition
from prometheus_client.samples import Exemplar
from prometheus_client.utils import floatToGoString

from chaosd.exporters.exemplars import Exemplars

__all__ = [
    "CONTENT_TYPES",
    "EOF",
    "ExemplarOf",
    "Format",
    "accepts_gzip",
    "deflated",
    "exemplars_of",
    "gzip_joined",
    "negotiate",
    "openmetrics",
]

Format = Literal["text", "openmetrics"]
CONTENT_TYPES: dict[Format, str] = {
    "text": CONTENT_TYPE_PLAIN_0_0_4,
    "openmetrics": openmetrics_exposition.CONTENT_TYPE_LATEST,
}
EOF = b"# EOF\n"  # OpenMetrics' last line: a body is rendered in parts, and only the whole ends with it
# A gzip member's header: deflate, no name, no time, unknown system (RFC 1952).
# How prometheus_client writes a float (Go's formatting), typed here: the library's is not.
_go_float = cast(Callable[[float], str], floatToGoString)
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


# A family's header in the text format: OpenMetrics names a counter without its samples' _total, escapes quotes in
# the help too, and calls untyped "unknown"; everything else prometheus_client writes alike in both.
_HEADER = re.compile(r"^# HELP (\S+) (.*)\n# TYPE (\S+) (\w+)$", re.MULTILINE)
# A bucket sample of a latency histogram, which may carry an exemplar.
_BUCKET = re.compile(
    r"^(chaosd_task_wait_seconds|chaosd_task_sojourn_seconds|chaosd_stage_attempt_seconds)_bucket\{(.*)\} (\S+)$",
    re.MULTILINE,
)
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
_UNESCAPE = {"\\\\": "\\", "\\n": "\n", '\\"': '"'}
# The exemplar a bucket sample carries: from its family's name and its labels (le among them), or None.
ExemplarOf = Callable[[str, dict[str, str]], Exemplar | None]
_HISTOGRAMS = {"chaosd_task_wait_seconds": "wait", "chaosd_task_sojourn_seconds": "sojourn"}


def _header(infos: Collection[str]) -> Callable[[re.Match[str]], str]:
    def header(match: re.Match[str]) -> str:
        name, doc, kind = match[1], match[2].replace('"', '\\"'), match[4]
        if kind == "counter":
            name = name.removesuffix("_total")
        elif kind == "gauge" and name.endswith("_info") and name.removesuffix("_info") in infos:
            name, kind = name.removesuffix("_info"), "info"
        elif kind == "untyped":
            kind = "unknown"
        return f"# HELP {name} {doc}\n# TYPE {name} {kind}"

    return header


def _labels(text: str) -> dict[str, str]:
    return {k: _unescape(v) if "\\" in v else v for k, v in _LABEL.findall(text)}


def _unescape(value: str) -> str:
    return re.sub(r"\\.", lambda m: _UNESCAPE.get(m[0], m[0]), value)


def openmetrics(text: bytes, exemplar_of: ExemplarOf | None = None, infos: Collection[str] = ()) -> bytes:
    """Families prometheus_client rendered in the text format, in OpenMetrics 1.0 (without the ``# EOF`` the
    body's end adds once), the latency histograms' buckets with ``exemplar_of``'s exemplars. Byte for byte what its
    OpenMetrics renderer writes (tests/unit/exporters/test_exposition.py), at a small share of its cost: that one
    checks every character of every label value, a few hundred milliseconds for a scrape of the default DAG.
    ``infos``: the info families among them (the text format writes them as gauges named ``…_info``)."""
    converted = _HEADER.sub(_header(infos), text.decode())
    if exemplar_of is not None:

        def marked(match: re.Match[str]) -> str:
            found = exemplar_of(match[1], _labels(match[2]))
            return match[0] if found is None else match[0] + _exemplar(found)

        converted = _BUCKET.sub(marked, converted)
    return converted.encode()


def _exemplar(exemplar: Exemplar) -> str:
    labels = ",".join(f'{k}="{v}"' for k, v in sorted(exemplar.labels.items()))  # hex ids: nothing to escape
    stamp = "" if exemplar.timestamp is None else f" {exemplar.timestamp}"
    return f" # {{{labels}}} {_go_float(exemplar.value)}{stamp}"


def exemplars_of(store: Exemplars) -> ExemplarOf:
    """The exemplar of a latency histogram's bucket sample in ``store``: its histogram by the family (a stage's by its
    ``stage`` label), its bucket by ``le``."""

    def exemplar_of(family: str, labels: dict[str, str]) -> Exemplar | None:
        key = _HISTOGRAMS.get(family) or f"stage:{labels.get('stage', '')}"
        return store.at(key, float(labels["le"]))

    return exemplar_of


def deflated(data: bytes, *, last: bool) -> bytes:
    """``data`` as raw deflate blocks that another part's can follow (a sync flush), or that end the stream."""
    # Level 1: a sixth of level 6's time for 14 % more bytes (200 kB of exposition: 0.4 ms, 15 kB against 2.1 ms,
    # 13 kB), and a scraper once in 15 s meets a new tick, so pays it at each scrape.
    compressor = zlib.compressobj(1, zlib.DEFLATED, -zlib.MAX_WBITS)
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
