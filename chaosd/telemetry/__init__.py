"""Watching the pipeline: windows and percentiles, the collapse detector, the throttle."""
