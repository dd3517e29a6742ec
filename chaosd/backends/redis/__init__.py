"""The Redis Streams backend: the queue, dispatch, leader, workers as processes, their health and control,
and the daemon's view of them.

May import what :mod:`chaosd.backends` may."""
