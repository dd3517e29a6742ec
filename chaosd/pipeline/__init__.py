"""The system under test: producers → bounded ingress queue → workers → sink (ledger)."""

from chaosd.pipeline.ledger import Counts, Ledger
from chaosd.pipeline.pipeline import Pipeline
from chaosd.pipeline.task import Task

__all__ = ["Counts", "Ledger", "Pipeline", "Task"]
