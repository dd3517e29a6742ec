"""Replications on a Dask distributed cluster (``chaosd run --cluster ADDRESS``; the ``cluster`` extra).

Only :func:`run_on_cluster` imports dask, and only :func:`chaosd.batch.replicate.run_many` imports this module, when
it is given a cluster: nothing else pays for dask, or needs it installed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from chaosd.core.errors import ConfigError

if TYPE_CHECKING:
    from chaosd.views import ReportView

Spec = TypeVar("Spec")  # what ``run`` takes: a picklable description of one run

__all__ = ["CONNECT_TIMEOUT", "check_address", "run_on_cluster"]

CONNECT_TIMEOUT = 10.0  # seconds to reach the scheduler before the address is refused
_ADDRESS = re.compile(r"^(tcp|tls|ws|wss|inproc|ucx)://[^\s/]+(:\d{1,5})?$")


def _refused(message: str) -> ConfigError:
    return ConfigError([("--cluster", "", message)])  # printed as "--cluster: message"


def check_address(address: str) -> None:
    """Refuse what cannot be a scheduler's address (``tcp://HOST:PORT``), before dask is imported."""
    if not _ADDRESS.match(address):
        raise _refused(f"not a scheduler address: {address!r} (use tcp://HOST:PORT, e.g. tcp://127.0.0.1:8786)")


def run_on_cluster(
    run: Callable[[Spec], ReportView],
    specs: Sequence[Spec],
    address: str,
    *,
    on_done: Callable[[int, ReportView], None] | None = None,
    timeout: float = CONNECT_TIMEOUT,
) -> list[ReportView]:
    """Every spec's ``run`` (:func:`chaosd.batch.replicate.run_one`) on the cluster at ``address``; the reports in
    spec order.

    The workers need chaosd importable, and the spec's scenario and config paths readable where they run.
    An address that cannot be reached within ``timeout`` seconds raises ConfigError naming ``--cluster``.
    """
    check_address(address)
    try:
        from distributed import Client, as_completed  # noqa: PLC0415
    except ImportError:
        raise _refused("needs dask's distributed package: pip install 'chaosd[cluster]'") from None
    try:
        client = Client(address, timeout=timeout)  # the default while it runs: as_completed finds it
    except (OSError, TimeoutError) as exc:
        raise _refused(f"cannot reach the scheduler at {address} within {timeout:g} s ({exc})") from None
    with client:
        # pure=False: equal specs are still separate runs; one key per spec keeps their order.
        futures = client.map(run, list(specs), pure=False)
        index = {future.key: i for i, future in enumerate(futures)}
        if on_done is not None:
            for future in as_completed(futures):
                on_done(index[future.key], future.result())
        reports: list[ReportView] = client.gather(futures)
    return reports
