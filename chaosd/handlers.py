"""What your own stage code imports: ``from chaosd.handlers import StageContext``.

A ``kind = "python"`` stage runs ``package.module:function``, an async callable of yours, with the task and a
:class:`StageContext`; its optional setup and teardown get a :class:`StageInfo` (docs/handlers.md). These are the
stable names for your code; chaosd itself keeps them in :mod:`chaosd.config.handlers`, where the config that names
a handler is checked.
"""

from chaosd.config.handlers import Handler, HandlerError, Setup, StageContext, StageInfo, Teardown

__all__ = ["Handler", "HandlerError", "Setup", "StageContext", "StageInfo", "Teardown"]
