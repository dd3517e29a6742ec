"""The version chaosd reports (in reports, /metrics and the API), kept where every layer may import it."""

__version__ = "0.1.0"
