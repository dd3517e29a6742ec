"""The one vocabulary of time and quantity every view uses, and the two ways a view treats keys it does not declare.

Time fields, everywhere:

- ``t`` and every name ending in ``_at`` (``injected_at``, ``started_at``, ``at``) is an **instant on the run
  clock**: seconds since the run started (virtual seconds in a virtual-time run).
- every name ending in ``_unix`` (``started_unix``) is an **instant on the wall clock**: seconds since the
  Unix epoch.
- every name ending in ``_s`` (``recovery_s``, ``uptime_s``) is a **duration in seconds**; so are ``ttl``,
  ``interval``, latency percentiles and the other durations whose schema says "seconds".
"""

from __future__ import annotations

from typing import Annotated

from pydantic import ConfigDict, Field, with_config

RunInstant = Annotated[float, Field(description="an instant on the run clock: seconds since the run started")]
UnixInstant = Annotated[float, Field(description="an instant on the wall clock: seconds since the Unix epoch")]
Duration = Annotated[float, Field(ge=0, description="a duration in seconds")]
Rate = Annotated[float, Field(ge=0, description="per second")]
Share = Annotated[float, Field(ge=0, description="a share, 0 to 1")]
Points = Annotated[float, Field(ge=0, le=100, description="0 to 100")]
SECONDS = "seconds"  # the description of a field that is a duration in seconds

closed_view = with_config(ConfigDict(extra="forbid"))
open_view = with_config(ConfigDict(extra="allow"))  # blocks that may carry more (a diagnostic's details, …)
