"""The command line: ``chaosd serve`` (the daemon's composition root, which starts the API), ``chaosd run``
and ``chaosd sweep``, and the client commands that talk to a running daemon over HTTP.

May import every package; only :mod:`chaosd.chaostoolkit` imports it."""
