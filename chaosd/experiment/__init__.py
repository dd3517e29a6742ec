"""One run: the experiment that assembles a pipeline, its telemetry, detector and throttle; the plans and
scenarios that drive faults beside it; its expectations, report, score and verdict.

May import every package below it (views up to admission); never batch, daemon, api, arena, exporters or cli."""
