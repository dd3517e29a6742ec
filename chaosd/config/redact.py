"""Secrets out of what is stored, served, logged or reported: passwords in URLs, and the settings as a whole.

The API token is a ``SecretStr`` and already dumps as ``"**********"``. A URL such as ``backend.url =
"redis://:PASSWORD@host:6379/0"`` is a plain string the code that connects must read as it is, so it is
redacted here, at the edges that write it anywhere: the stored run config (and so ``GET /api/v1/runs/{id}``)
and the messages that name the server.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import overload

from chaosd.config.settings import Settings
from chaosd.core.urls import MASK, URL_PREFIX, redact_url

__all__ = ["MASK", "redact_url", "redacted", "redacted_settings"]  # MASK and redact_url live in chaosd.core.urls


@overload
def redacted(value: Mapping[str, object]) -> dict[str, object]: ...
@overload
def redacted(value: object) -> object: ...
def redacted(value: object) -> object:
    """A JSON-like value with every string that is a URL redacted (:func:`redact_url`), at any depth."""
    if isinstance(value, str):
        return redact_url(value) if URL_PREFIX.match(value) else value
    if isinstance(value, Mapping):
        return {k: redacted(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redacted(v) for v in value]
    return value


def redacted_settings(settings: Settings) -> dict[str, object]:
    """The settings as a JSON-able dict, safe to store and serve: the token masked, URLs without passwords."""
    data: dict[str, object] = settings.model_dump(mode="json")
    return redacted(data)
