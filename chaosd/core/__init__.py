"""The vocabulary every part shares: the clock and its event loops, seeded random streams, durations, the error
root, histograms, bounded history, confidence intervals, and how numbers are written for people.

Imports nothing of chaosd but :mod:`chaosd.views` (the shapes)."""
