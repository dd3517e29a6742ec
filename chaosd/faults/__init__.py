"""Faults: a catalogue of reversible actions on the agent runtime, and the injector that owns them."""

from chaosd.faults.catalogue import CATALOGUE, Action
from chaosd.faults.injector import Injector
from chaosd.faults.record import FaultRecord

__all__ = ["CATALOGUE", "Action", "FaultRecord", "Injector"]
