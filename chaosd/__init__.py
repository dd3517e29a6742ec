"""chaosd: break an agent → queue → worker pipeline on purpose and measure whether it heals."""

__version__ = "0.1.0"

__all__ = ["__version__"]
