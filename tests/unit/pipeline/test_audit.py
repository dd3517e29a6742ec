"""The effect audit: duplicates are measured apart from the sink that suppresses them, and named.

Unit cases on the audit and the ledger, then a negative control in virtual time: the same redelivering run
with the idempotent sink on (no duplicate) and off (duplicates counted, consistency lower, ids named).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import pytest
from conftest import settings
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from chaosd.core.clock import LoopClock, new_event_loop
from chaosd.experiment.report import render_summary
from chaosd.experiment.runner import Experiment
from chaosd.exporters.metrics import make_registry
from chaosd.pipeline.audit import EXAMPLES, Audit
from chaosd.pipeline.ledger import Ledger
from chaosd.pipeline.task import Task

# --- the audit on its own ----------------------------------------------------------------------------------


def test_a_second_effect_for_one_task_is_one_duplicate_named_by_its_id() -> None:
    audit = Audit()
    task = Task(42, 0.0, measured=True)
    audit.owe(task.id)
    assert audit.owing == 1
    audit.effect(task)  # the effect it owed: settled
    assert audit.owing == 0 and audit.total.count == 0 and audit.measured.count == 0
    audit.effect(task)  # the same effect again
    assert audit.total.count == 1 and audit.measured.count == 1
    assert audit.total.examples == [42] and audit.measured.examples == [42]
    assert audit.owing == 0


def test_examples_are_capped_and_distinct_while_the_count_keeps_going() -> None:
    audit = Audit()
    tasks = [Task(i, 0.0, measured=True) for i in range(1, 101)]
    for task in tasks:
        audit.owe(task.id)
        audit.effect(task)
    for task in tasks:
        audit.effect(task)
        audit.effect(task)  # a third effect: another duplicate, not another example
    assert audit.measured.count == 200 and audit.total.count == 200
    assert audit.measured.examples == [1, 2, 3, 4, 5] and len(audit.measured.examples) == EXAMPLES
    assert audit.owing == 0


def test_cohorts_mirror_the_ledger_warm_up_duplicates_count_only_in_total() -> None:
    audit = Audit()
    warm, measured = Task(1, 0.0, measured=False), Task(2, 10.0, measured=True)
    for task in (warm, measured):
        audit.owe(task.id)
        audit.effect(task)
        audit.effect(task)
    assert audit.total.count == 2 and audit.total.examples == [1, 2]
    assert audit.measured.count == 1 and audit.measured.examples == [2]


def test_state_is_the_owed_effects_only_and_shrinks_to_zero_when_all_are_settled() -> None:
    audit = Audit()
    tasks = [Task(i, 0.0, measured=True) for i in range(10_000)]
    for task in tasks:
        audit.owe(task.id)
    assert audit.owing == 10_000
    for task in tasks[:9_990]:
        audit.effect(task)
    assert audit.owing == 10  # still owed: in flight (or lost)
    for task in tasks[9_990:]:
        audit.effect(task)
    assert audit.owing == 0 and audit.total.count == 0
    # Duplicates add a count and at most EXAMPLES ids, never per-task state.
    for task in tasks:
        audit.effect(task)
    assert audit.owing == 0 and audit.total.count == 10_000 and len(audit.total.examples) == EXAMPLES


def test_an_effect_nobody_was_owed_is_a_duplicate() -> None:
    # A buggy sink applying an effect for a task the audit never heard of (or already settled).
    audit = Audit()
    audit.effect(Task(7, 0.0, measured=True))
    assert audit.measured.count == 1 and audit.measured.examples == [7]


# --- the ledger (the sink) feeding the audit ---------------------------------------------------------------


def test_the_ledger_owes_on_accept_and_settles_on_the_first_outcome() -> None:
    audit = Audit()
    ledger = Ledger(0.0, idempotent=True, audit=audit)
    done, failed, held = (Task(i, 0.0, measured=True) for i in (1, 2, 3))
    for task in (done, failed, held):
        ledger.accept(task)
    assert audit.owing == 3
    ledger.complete(done, 1.0)
    ledger.fail(failed, "error")
    assert audit.owing == 1 == len(ledger.in_flight)  # only the task still held is owed
    ledger.complete(done, 2.0)  # redelivered: the idempotent sink suppresses it, no effect
    ledger.fail(failed, "error")
    assert ledger.deduplicated == 2 and audit.total.count == 0


def test_without_idempotence_every_second_outcome_is_a_duplicate_effect() -> None:
    audit = Audit()
    ledger = Ledger(0.0, idempotent=False, audit=audit)
    a, b = Task(1, 0.0, measured=True), Task(2, 0.0, measured=True)
    for task in (a, b):
        ledger.accept(task)
    ledger.complete(a, 1.0)
    ledger.fail(b, "error")
    ledger.complete(a, 2.0)
    ledger.complete(b, 2.0)  # a completion after a failure: still a second effect
    assert ledger.deduplicated == 0
    assert audit.measured.count == 2 and audit.measured.examples == [1, 2]
    assert ledger.measured.completed == 1 and ledger.measured.failed == 1  # outcomes are not double counted


def test_the_audit_catches_a_duplicate_the_sinks_own_bookkeeping_misses() -> None:
    # An idempotent sink whose memory is wrong: the task is registered in flight again after it ended (say,
    # a re-dispatch re-registers it). The sink then takes the second outcome for a first one and applies it.
    # Measured from ``in_flight`` (the sink's own memory), that is no duplicate at all; the audit counts it.
    audit = Audit()
    ledger = Ledger(0.0, idempotent=True, audit=audit)
    task = Task(9, 0.0, measured=True)
    ledger.accept(task)
    ledger.complete(task, 1.0)
    ledger.in_flight[task.id] = task  # the bug: the sink forgets the task already ended
    ledger.complete(task, 2.0)
    assert ledger.deduplicated == 0 and ledger.measured.completed == 2  # the sink saw nothing wrong
    assert audit.measured.count == 1 and audit.measured.examples == [9]


# --- negative control: the same redelivering run, idempotent sink on and off ----------------------------


@dataclass
class _Run:
    report: dict[str, Any]
    exp: Experiment
    outcomes: Counter[int]  # outcomes the sink was handed, per task id (the test's own oracle)
    measured: set[int]
    duplicated_metric: float


def _redelivering_run(idempotent: bool) -> _Run:
    """Three leader kills: the acks held by the dead leader are lost, the new one re-dispatches those tasks."""
    s = settings({"load": {"rate": 150.0}, "sink": {"idempotent": idempotent}})
    outcomes: Counter[int] = Counter()
    measured: set[int] = set()

    async def plan(exp: Experiment) -> None:
        for at in (10.0, 20.0, 30.0):
            await exp.clock.sleep_until(exp.pipeline.t0 + at)
            exp.injector.inject("kill_leader", ttl=5.0)

    loop = new_event_loop(virtual=True)
    try:
        exp = Experiment(s, LoopClock(loop), warmup=5.0)
        ledger = exp.pipeline.ledger
        complete, fail = ledger.complete, ledger.fail

        def seen(task: Task) -> None:
            outcomes[task.id] += 1
            if task.measured:
                measured.add(task.id)

        def on_complete(task: Task, *args: Any, **kwargs: Any) -> None:
            seen(task)
            complete(task, *args, **kwargs)

        def on_fail(task: Task, *args: Any, **kwargs: Any) -> None:
            seen(task)
            fail(task, *args, **kwargs)

        ledger.complete = on_complete  # type: ignore[method-assign]
        ledger.fail = on_fail  # type: ignore[method-assign]
        registry = make_registry(exp)
        report = loop.run_until_complete(exp.run(45.0, plan=plan))
        families = {f.name: f for f in text_string_to_metric_families(generate_latest(registry).decode())}
        metric = families["chaosd_tasks_duplicated"].samples[0].value
    finally:
        loop.close()
    return _Run(report, exp, outcomes, measured, metric)


@pytest.fixture(scope="module")
def control() -> tuple[_Run, _Run]:
    return _redelivering_run(idempotent=True), _redelivering_run(idempotent=False)


def _expected_consistency(report: dict[str, Any]) -> float:
    """chaosd/experiment/score.py's consistency, recomputed from the report's own numbers."""
    t = report["tasks"]
    ended = t["accepted"] - t["in_flight"]
    corrupt = next((d["count"] for d in report["diagnostics"] if d["cause"] == "corruption_undetected"), 0)
    expected = 100 * (ended - t["lost"] - t["duplicated"] - corrupt) / ended
    judged = [i for i in report["incidents"] if i["outcome"] in ("recovered", "failed")]
    if judged and "consistent" in judged[0]:
        # Where incidents are judged for consistency too, the score takes the lower of the two.
        expected = min(expected, 100 * sum(1 for i in judged if i["consistent"]) / len(judged))
    return expected


def test_with_the_idempotent_sink_redelivery_happens_and_nothing_is_duplicated(control: tuple[_Run, _Run]) -> None:
    safe = control[0]
    r = safe.report
    # Redelivery did happen, and the sink suppressed the copies of tasks that had ended: not a vacuous control.
    assert r["runtime"]["redispatched"] > 0 and r["runtime"]["deduplicated"] > 0
    assert r["tasks"]["duplicated"] == 0 and r["tasks"]["lost"] == 0
    assert r["score"]["consistency"] == 100.0
    assert not any(d["cause"] == "duplicated" for d in r["diagnostics"])
    assert safe.exp.pipeline.audit.total.count == 0 and safe.duplicated_metric == 0.0
    assert "duplicated 0" in render_summary(r) and "first task ids" not in render_summary(r)


def test_without_it_the_audit_counts_and_names_the_duplicates_and_consistency_falls(
    control: tuple[_Run, _Run],
) -> None:
    safe, unsafe = control
    r = unsafe.report
    t = r["tasks"]
    # The same run (seed, load, faults); only the sink differs.
    assert t["offered"] == safe.report["tasks"]["offered"] and len(r["faults"]) == len(safe.report["faults"]) == 3
    assert r["runtime"]["deduplicated"] == 0 and r["runtime"]["redispatched"] > 0
    # The test's own count of extra outcomes for measured tasks: each one was an effect applied again.
    extra = {tid: n - 1 for tid, n in unsafe.outcomes.items() if n > 1 and tid in unsafe.measured}
    assert t["duplicated"] == sum(extra.values()) > EXAMPLES
    assert t["lost"] == 0
    assert r["score"]["consistency"] == pytest.approx(_expected_consistency(r), abs=1e-6)
    assert r["score"]["consistency"] < safe.report["score"]["consistency"] == 100.0
    # The diagnostics name them: the count, and the first few task ids, in the order they were duplicated.
    entry = next(d for d in r["diagnostics"] if d["cause"] == "duplicated")
    assert entry["count"] == t["duplicated"]
    assert len(entry["examples"]) == EXAMPLES == len(set(entry["examples"]))
    assert set(entry["examples"]) <= set(extra)
    assert entry["examples"] == unsafe.exp.pipeline.audit.measured.examples
    summary = render_summary(r)
    ids = ", ".join(map(str, entry["examples"]))
    assert f"duplicated {t['duplicated']} (first task ids: {ids})" in summary
    # Prometheus reads the audit too (all cohorts, warm-up included).
    assert unsafe.duplicated_metric == unsafe.exp.pipeline.audit.total.count >= t["duplicated"]


def test_after_the_run_the_audit_holds_only_what_is_still_owed(control: tuple[_Run, _Run]) -> None:
    for run in control:
        p = run.exp.pipeline
        assert p.audit.owing == len(p.ledger.in_flight)  # in flight (or lost), nothing per finished task
        assert p.audit.owing <= p.settings.queue.capacity + p.settings.workers.count
        assert len(p.audit.total.examples) <= EXAMPLES
