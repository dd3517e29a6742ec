"""The long-running daemon's own parts: the controller of its live experiment and the runs driven against it, and
the SQLite history that survives restarts.

May import every package up to :mod:`chaosd.exporters`; never api, arena or cli."""
