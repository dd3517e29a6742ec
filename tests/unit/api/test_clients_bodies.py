"""The callers' policy as the API takes it: a JSON merge patch on the policy in force, validated and named as the
config's ``[clients]`` table is."""

from __future__ import annotations

from typing import get_args

import pytest

from chaosd.api.bodies import ClientsKey, clients_policy, merge_patch
from chaosd.api.errors import HttpError
from chaosd.config.settings import ClientsConfig


def test_a_merge_patch_merges_objects_replaces_the_rest_and_null_removes() -> None:
    current = {"timeout": 1.0, "backoff": {"base": 0.1, "max": 1.0}, "budget": None, "retry_on": ["timeout"]}
    patch = {"backoff": {"max": 2.0}, "budget": {"ratio": 0.1}, "retry_on": ["failed"], "timeout": None}
    assert merge_patch(current, patch) == {
        "backoff": {"base": 0.1, "max": 2.0},
        "budget": {"ratio": 0.1},
        "retry_on": ["failed"],
    }
    assert current["timeout"] == 1.0  # the policy in force is never changed in place


def test_a_bad_policy_is_named_as_the_config_names_it() -> None:
    with pytest.raises(HttpError) as caught:
        clients_policy({"timeout": -1}, {"timeout": -1})
    assert (caught.value.status, caught.value.field) == (400, "clients.timeout")
    assert caught.value.message == "Input should be greater than or equal to 0 (got -1)"
    with pytest.raises(HttpError) as caught:
        clients_policy({"retires": 3}, {"retires": 3})
    assert caught.value.message == "unknown key; did you mean clients.retries?"
    assert clients_policy({"retries": 3}, {"retries": 3}) == ClientsConfig(retries=3)


def test_the_answer_names_every_key_of_the_policy() -> None:
    """``changed`` is typed with the policy's keys: a key added to [clients] must be added to ClientsKey too."""
    assert get_args(ClientsKey) == tuple(ClientsConfig.model_fields)
