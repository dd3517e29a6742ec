"""``chaosd run --replications N --cluster ADDRESS``: a real Dask scheduler and two workers on loopback give the
bytes ``--jobs`` gives; a bad or unreachable address → exit 2 within a bounded time; dask stays off other paths."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from chaosd.batch.cluster import CONNECT_TIMEOUT, run_on_cluster
from chaosd.cli.main import main
from chaosd.core.clock import wall_time

ROOT = Path(__file__).resolve().parents[2]
distributed = pytest.importorskip("distributed")  # the test extra installs it; the cluster extra for users


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)  # its own group: a worker's nanny and its child with it
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=20)


@pytest.fixture(scope="module")
def scheduler(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Dask scheduler and two single-threaded workers on loopback, stopped by PID at the end; its address."""
    folder = tmp_path_factory.mktemp("dask")
    info = folder / "scheduler.json"
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")  # the workers run this checkout
    common = {"cwd": folder, "env": env, "stdout": subprocess.DEVNULL, "start_new_session": True}
    started: list[subprocess.Popen[bytes]] = []
    try:
        started.append(
            subprocess.Popen(
                [
                    *(sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", "0"),
                    *("--no-dashboard", "--scheduler-file", str(info)),
                ],
                stderr=(folder / "scheduler.log").open("wb"),
                **common,  # type: ignore[call-overload]
            )
        )
        deadline = wall_time() + 60
        while not (info.exists() and info.stat().st_size > 0):
            assert started[0].poll() is None, (folder / "scheduler.log").read_text()
            assert wall_time() < deadline, "the scheduler did not write its address within 60 s"
            _pause(started[0])
        address = json.loads(info.read_text())["address"]
        for k in range(2):
            started.append(
                subprocess.Popen(
                    [
                        *(sys.executable, "-m", "distributed.cli.dask_worker", address, "--nthreads", "1"),
                        *("--nworkers", "1", "--no-dashboard", "--host", "127.0.0.1"),
                    ],
                    stderr=(folder / f"worker{k}.log").open("wb"),
                    **common,  # type: ignore[call-overload]
                )
            )
        with distributed.Client(address, timeout=30) as client:
            client.wait_for_workers(2, timeout=120)  # polls the scheduler until both registered, or fails
        yield address
    finally:
        for process in reversed(started):
            _stop(process)


def _pause(process: subprocess.Popen[bytes]) -> None:
    """Wait a little for the scheduler's address file: on the process itself, which returns when it exits."""
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=0.1)


def _cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.slow
def test_the_cluster_gives_the_local_jobs_bytes(
    scheduler: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["run", "--survival", "--duration", "30", "--seed", "11", "--replications", "4", "--quiet"]
    local, remote = tmp_path / "local.json", tmp_path / "cluster.json"
    assert _cli([*base, "--jobs", "2", "--report", str(local)], capsys)[0] == 0
    assert _cli([*base, "--cluster", scheduler, "--report", str(remote)], capsys)[0] == 0
    assert remote.read_bytes() == local.read_bytes()
    block = json.loads(remote.read_text())["replications"]
    assert block["n"] == 4 and block["seeds"][0] == 11 and len(set(block["seeds"])) == 4
    assert sum(block["grade_counts"].values()) == 4 and block["score"]["ci95"] is not None


@pytest.mark.parametrize(
    ("address", "named"),
    [
        ("nope", "--cluster: not a scheduler address: 'nope'"),
        ("http://127.0.0.1:8786", "--cluster: not a scheduler address"),
        ("tcp://127.0.0.1:9", "--cluster: cannot reach the scheduler at tcp://127.0.0.1:9"),  # discard: no listener
    ],
)
def test_a_bad_cluster_address_exits_2_in_bounded_time(
    address: str, named: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # An unreachable scheduler is given up after the connect timeout: 2 s here rather than CONNECT_TIMEOUT's 10 s
    # (the bound below is that timeout plus room for a busy host).
    timeout = 2.0
    assert run_on_cluster.__kwdefaults__ is not None and run_on_cluster.__kwdefaults__["timeout"] == CONNECT_TIMEOUT
    monkeypatch.setitem(run_on_cluster.__kwdefaults__, "timeout", timeout)
    report = tmp_path / "r.json"
    started = wall_time()
    code, _, err = _cli(
        ["run", "--duration", "10", "--replications", "2", "--cluster", address, "--report", str(report)], capsys
    )
    assert code == 2 and named in err
    if "cannot reach" in named:
        assert f"within {timeout:g} s" in err
    assert wall_time() - started < timeout + 20
    assert not report.exists()


def test_dask_stays_off_every_other_path(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from chaosd.cli.main import main\n"
        "args = ['run', '--duration', '5', '--replications', '2', '--jobs', '1', '--quiet', '--report', sys.argv[1]]\n"
        "status = main(args)\n"
        "print(status, sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "r.json")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.stdout.strip() == "0 []", done.stdout + done.stderr
