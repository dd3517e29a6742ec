"""Typed application state keys (aiohttp ``AppKey``)."""

from __future__ import annotations

import asyncio

from aiohttp import web

from chaosd.api.server import HttpStats
from chaosd.api.sse import Broker
from chaosd.config.settings import ApiConfig
from chaosd.daemon.control import Controller
from chaosd.daemon.lifecycle import FinalReport
from chaosd.daemon.storage import Storage
from chaosd.exporters.metrics import MetricsRegistry
from chaosd.exporters.tracing import Tracing

__all__ = [
    "BROKER",
    "CONTROLLER",
    "HTTP_STATS",
    "LIMITS",
    "OPENAPI",
    "REGISTRY",
    "REPORT",
    "RUN_ID",
    "STARTED",
    "STOP",
    "STORAGE",
    "TRACING",
    "FinalReport",
]

CONTROLLER = web.AppKey("controller", Controller)
STORAGE = web.AppKey("storage", Storage)
BROKER = web.AppKey("broker", Broker)
RUN_ID = web.AppKey("run_id", str)
STARTED = web.AppKey("started", float)
STOP = web.AppKey("stop", asyncio.Event)  # ends the pipeline (the last step of shutdown but two)


REPORT = web.AppKey("report", FinalReport)
OPENAPI = web.AppKey("openapi", dict)  # the document served, walked from the route table at build
REGISTRY = web.AppKey("registry", MetricsRegistry)
HTTP_STATS = web.AppKey("http_stats", HttpStats)
LIMITS = web.AppKey("limits", ApiConfig)  # the [api] limits the server enforces
TRACING = web.AppKey("tracing", Tracing)  # present when the daemon traces
