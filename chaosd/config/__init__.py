"""Configuration: the settings' models, TOML read once and overlaid by a scenario and ``CHAOSD_…`` variables,
the problems a user reads when a value is wrong, user handlers named by the config, and secrets kept out of output.

May import :mod:`chaosd.views`, :mod:`chaosd.core` and :mod:`chaosd.events`."""
