"""The version chaosd reports (in reports, /metrics, the API and ``chaosd --version``), kept where every layer may
import it. Its one source is pyproject.toml's ``version``, read from the installed distribution's metadata."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

__all__ = ["__version__"]

# Only when no chaosd distribution is installed (the package imported from a source tree put on sys.path without
# `pip install`): a version that no release has, so nothing mistakes such a run for a released one.
_NOT_INSTALLED = "0+unknown"


def _installed_version() -> str:
    try:
        return version("chaosd")
    except PackageNotFoundError:
        return _NOT_INSTALLED


__version__ = _installed_version()
