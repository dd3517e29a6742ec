"""Faults: a catalogue of reversible actions on the agent runtime, and the injector that owns them."""

from chaosd.faults.catalogue import CATALOGUE, Action
from chaosd.faults.injector import FaultRecord, Injector

__all__ = ["CATALOGUE", "Action", "FaultRecord", "Injector"]
