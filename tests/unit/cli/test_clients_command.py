"""``chaosd clients set KEY=VALUE …`` as the merge patch it sends, and the policy printed as a ``[clients]`` table
that a config file can take back."""

from __future__ import annotations

import tomllib

import pytest

from chaosd.cli.clients_command import assignments, policy_lines, toml_value
from chaosd.cli.exits import EXIT_USAGE
from chaosd.cli.transport import ClientError
from chaosd.config.settings import ClientsConfig, Settings


def test_values_are_read_as_toml_and_what_is_not_toml_is_sent_as_text() -> None:
    assert [toml_value(t) for t in ("0.5", "3", "true", '["timeout", "failed"]', "{ratio = 0.1}")] == [
        0.5,
        3,
        True,
        ["timeout", "failed"],
        {"ratio": 0.1},
    ]
    # A duration with its unit, a word, and what JSON cannot carry go as text; the daemon names what is wrong.
    assert [toml_value(t) for t in ("250ms", "constant", "inf", "1979-05-27", "")] == [
        "250ms",
        "constant",
        "inf",
        "1979-05-27",
        "",
    ]
    assert toml_value("null") is None  # the merge patch's "restore the default"


def test_assignments_make_one_merge_patch() -> None:
    patch = assignments(["timeout=0.5", "retries=3", "budget.ratio=0.1", "backoff.base=10ms", "clients.retry_after=1"])
    assert patch == {
        "timeout": 0.5,
        "retries": 3,
        "budget": {"ratio": 0.1},
        "backoff": {"base": "10ms"},
        "retry_after": 1,
    }


@pytest.mark.parametrize(
    ("items", "words"),
    [
        ([], "at least one KEY=VALUE"),
        (["retries"], "expected KEY=VALUE"),
        (["=3"], "expected KEY=VALUE"),
        (["budget..ratio=1"], "expected KEY=VALUE"),
        (["retries=1", "retries=2"], "retries given twice"),
        (["budget=null", "budget.ratio=0.1"], "budget given twice"),
        (["budget.ratio=0.1", "budget.ratio=0.2"], "budget.ratio given twice"),
    ],
)
def test_a_bad_assignment_is_a_usage_error_before_anything_is_sent(items: list[str], words: str) -> None:
    with pytest.raises(ClientError) as caught:
        assignments(items)
    assert caught.value.code == EXIT_USAGE and words in caught.value.message


def test_the_policy_printed_is_a_clients_table_a_config_reads_back_as_the_same_policy() -> None:
    policy = ClientsConfig(timeout=1e-6, retries=3, retry_on=("failed",), budget={"ratio": 0.1})  # type: ignore[arg-type]
    lines = policy_lines(policy.model_dump(mode="json"))
    assert lines[0] == "[clients]" and "# patience: not set" in lines
    read = tomllib.loads("\n".join(lines))
    assert Settings(**read).clients == policy
    assert policy_lines(ClientsConfig().model_dump(mode="json")) != lines  # a control: the text shows the values
