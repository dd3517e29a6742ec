"""The flight recorder: lifecycle events with their clock time, what each kind carries, bounded, with live
subscribers.

May import :mod:`chaosd.views` and :mod:`chaosd.core`."""
