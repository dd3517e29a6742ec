"""chaosd: break an agent → queue → worker pipeline on purpose and measure whether it heals."""

from __future__ import annotations

from chaosd.core.version import __version__

__all__ = ["__version__", "discover"]


def discover(discover_system: bool = True) -> dict[str, object]:
    """Chaos Toolkit's discovery: ``chaos discover chaosd`` imports the package the ``chaosd`` distribution
    provides (this one) and calls its ``discover``. The extension is imported only then: ``import chaosd`` stays
    cheap for the command line. See :func:`chaosd.chaostoolkit.discover`."""
    from chaosd.chaostoolkit import discover as extension  # noqa: PLC0415

    return extension(discover_system)
