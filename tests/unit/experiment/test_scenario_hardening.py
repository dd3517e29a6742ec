"""Scenario names and documents from the network: strict names, bounded YAML and JSON, messages that quote nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from chaosd.api.app import status_of
from chaosd.core.errors import FaultError, ScenarioError
from chaosd.experiment.scenario import SHIPPED, Scenario, load_scenario, parse_scenario, resolve_scenario_name

ROOT = Path(__file__).resolve().parents[3]
MARKER = "SECRET-7f3a9c"  # stands for whatever a file holds that must never come back in a message
VALID = "name: x\nduration: 10s\n"


def _problem(text: str | bytes, **kwargs: int) -> str:
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(text, "upload", **kwargs)
    return "; ".join(caught.value.lines())


# --- names ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "../etc/passwd",
        "/etc/passwd",
        "pyproject.toml",
        "baseline.yaml/../x",
        "scenarios/baseline",
        "baseline\n",
        "base line",
        "baseline.yaml.yaml",
        ".yaml",
        "",
        "a" * 101,
        "..",
    ],
)
def test_a_name_that_is_not_a_plain_name_is_refused_without_being_echoed(name: str) -> None:
    with pytest.raises(FaultError) as caught:
        resolve_scenario_name(name)
    assert status_of(caught.value) == 422 and caught.value.field == "name"
    assert caught.value.message == (
        "must be a scenario name (1–100 letters, digits, '_' or '-', optionally ending in .yaml, .yml or .json), "
        "not a path"
    )


def test_a_shipped_scenario_is_found_by_name_with_or_without_suffix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no ./scenarios here: the shipped directory answers
    assert resolve_scenario_name("baseline") == (SHIPPED / "baseline.yaml").resolve()
    assert resolve_scenario_name("baseline.yaml") == (SHIPPED / "baseline.yaml").resolve()
    assert load_scenario(resolve_scenario_name("baseline")).name == "baseline"


def test_the_working_directory_scenarios_come_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "scenarios").mkdir()
    (tmp_path / "scenarios" / "baseline.yaml").write_text(VALID)
    (tmp_path / "scenarios" / "mine.yml").write_text(VALID)
    (tmp_path / "scenarios" / "profile.json").write_text('{"name": "x", "duration": 10}')
    monkeypatch.chdir(tmp_path)
    assert resolve_scenario_name("baseline") == (tmp_path / "scenarios" / "baseline.yaml").resolve()
    assert resolve_scenario_name("mine") == (tmp_path / "scenarios" / "mine.yml").resolve()
    assert resolve_scenario_name("profile") == (tmp_path / "scenarios" / "profile.json").resolve()
    assert resolve_scenario_name("profile.json") == (tmp_path / "scenarios" / "profile.json").resolve()
    assert load_scenario(resolve_scenario_name("profile.json")).duration == 10


def test_an_unknown_name_is_404_and_quotes_the_checked_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.yaml").write_text(VALID)  # in the working directory, not a scenario directory
    for name in ("no_such_scenario", "pyproject"):
        with pytest.raises(FaultError) as caught:
            resolve_scenario_name(name)
        assert status_of(caught.value) == 404
        assert caught.value.message == f"no scenario named {name!r} in the scenario directories"


def test_a_symlink_out_of_the_scenario_directory_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    outside = tmp_path / "private"
    outside.mkdir()
    (outside / "secret.yaml").write_text(f"name: {MARKER}\nduration: 1\n")
    folder = tmp_path / "work" / "scenarios"
    folder.mkdir(parents=True)
    (folder / "escape.yaml").symlink_to(outside / "secret.yaml")
    (folder / "dangling.yaml").symlink_to(tmp_path / "missing.yaml")
    (folder / "real.yaml").write_text(VALID)
    (folder / "alias.yaml").symlink_to("real.yaml")
    monkeypatch.chdir(tmp_path / "work")
    for name in ("escape", "dangling"):
        with pytest.raises(FaultError) as caught:
            resolve_scenario_name(name)
        assert status_of(caught.value) == 404
        assert "private" not in caught.value.message and MARKER not in caught.value.message
    # A link that stays inside the directory is fine.
    assert resolve_scenario_name("alias") == (folder / "real.yaml").resolve()


def test_a_directory_named_like_a_scenario_is_not_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "scenarios" / "odd.yaml").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FaultError) as caught:
        resolve_scenario_name("odd")
    assert status_of(caught.value) == 404


# --- bytes and size ------------------------------------------------------------------------------------


def test_invalid_utf8_names_the_source_and_the_byte() -> None:
    data = VALID.encode() + b"description: caf\xe9\n"
    assert _problem(data) == f"upload: not valid UTF-8 (byte {len(VALID) + len('description: caf') + 1})"


def test_valid_utf8_bytes_parse_like_text() -> None:
    text = VALID + "description: café ☕\n"
    assert parse_scenario(text.encode(), "upload") == parse_scenario(text, "upload")
    assert parse_scenario(b"\xef\xbb\xbf" + text.encode(), "upload").description == "café ☕"


def test_a_document_larger_than_max_bytes_is_refused_before_parsing() -> None:
    text = VALID + "description: " + "é" * 20 + "\n"
    size = len(text.encode())
    assert parse_scenario(text, "upload", max_bytes=size).name == "x"
    assert parse_scenario(text.encode(), "upload", max_bytes=size).name == "x"
    assert _problem(text, max_bytes=size - 1) == f"upload: larger than {size - 1} bytes"  # counted in UTF-8
    assert _problem(text.encode(), max_bytes=size - 1) == f"upload: larger than {size - 1} bytes"
    # Too big is found before the content is looked at: an invalid tail does not matter.
    assert "larger than" in _problem(b"\xff" * 100, max_bytes=99)


def test_load_scenario_stops_reading_at_max_bytes(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text(VALID + "# " + "x" * 10_000 + "\n")
    assert load_scenario(path).name == "x"
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path, max_bytes=1000)
    assert caught.value.lines() == [f"{path}: larger than 1000 bytes"]


def test_load_scenario_reports_bad_bytes_and_missing_files_by_path(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"name: caf\xe9\nduration: 1\n")
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path)
    assert caught.value.lines() == [f"{path}: not valid UTF-8 (byte 10)"]
    with pytest.raises(ScenarioError) as caught:
        load_scenario(tmp_path / "absent.yaml")
    assert caught.value.lines() == [f"{tmp_path / 'absent.yaml'}: file not found"]
    with pytest.raises(ScenarioError) as caught:
        load_scenario(tmp_path)
    assert caught.value.lines()[0].startswith(f"{tmp_path}: cannot read: ")


# --- shape limits --------------------------------------------------------------------------------------


def _laughs(levels: int = 9, width: int = 10) -> str:
    lines = ['lol0: &l0 "lol"']
    for level in range(1, levels + 1):
        lines.append(f"lol{level}: &l{level} [{', '.join([f'*l{level - 1}'] * width)}]")
    return VALID + "load:\n" + "".join(f"  {line}\n" for line in lines)


@pytest.mark.timeout(5)
def test_a_billion_laughs_bomb_is_refused_before_it_is_built() -> None:
    problem = _problem(_laughs())
    assert problem.startswith("upload: refused at line ")
    assert "more than 100000 YAML nodes, counting what aliases expand to" in problem


def test_a_few_aliases_are_fine_and_merge_keys_work() -> None:
    text = VALID + "load: &load {rate: 50, producers: 2}\nconfig:\n  load: {<<: *load, producers: 4}\n"
    scenario = parse_scenario(text, "upload")
    assert scenario.config == {"load": {"rate": 50, "producers": 4}} and scenario.load["rate"] == 50


def test_more_than_a_hundred_alias_uses_are_refused() -> None:
    text = VALID + "load:\n  a: &a 1\n  b: [" + ", ".join(["*a"] * 101) + "]\n"
    assert "too many YAML aliases (more than 100)" in _problem(text)
    fine = VALID + "load:\n  a: &a 1\n  b: [" + ", ".join(["*a"] * 100) + "]\n"
    assert len(parse_scenario(fine, "upload").load["b"]) == 100


def test_a_recursive_alias_is_refused() -> None:
    assert "recursive YAML alias" in _problem(VALID + "load: &a {again: *a}\n")


def test_nesting_deeper_than_32_collections_is_refused() -> None:
    # The document mapping is level 1, ``load`` level 2, then the lists.
    assert "nested deeper than 32 levels" in _problem(VALID + "load: {a: " + "[" * 40 + "]" * 40 + "}\n")
    assert "nested deeper than 32 levels" in _problem(VALID + "load: {a: " + "[" * 31 + "]" * 31 + "}\n")
    assert parse_scenario(VALID + "load: {a: " + "[" * 30 + "]" * 30 + "}\n", "upload").name == "x"


def test_an_alias_counts_its_depth_where_it_stands() -> None:
    text = VALID + "load:\n  a: &a " + "[" * 20 + "]" * 20 + "\n  b: " + "{k: " * 15 + "*a" + "}" * 15 + "\n"
    assert "nested deeper than 32 levels" in _problem(text)


@pytest.mark.timeout(30)
def test_more_than_100000_nodes_are_refused() -> None:
    assert "more than 100000 YAML nodes" in _problem(VALID + "load: {a: [" + ",".join(["1"] * 100_001) + "]}\n")


# --- messages that quote nothing -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "position"),
    [
        (f"name: {MARKER}\nduration: [1, 2\nfoo: {MARKER}: x\n", "line 3, column 4"),
        (f"name: '{MARKER}\n", "line 2, column 1"),
        (f"name: x\nduration: *{MARKER}\n", "line 2, column 11"),
        (f"name: x\nduration: !{MARKER} 1\n", "line 2, column 11"),
        (f"name: x\nduration: !!int {MARKER}\n", "line 2, column 11"),
        (f"name: {MARKER}\nduration: 1\nseed: {'9' * 5000}\n", "line 3, column 7"),
        (f"name: x\n\x00{MARKER}\n", "line 2, column 1"),
        (f"name: x\nduration: 1\n? [{MARKER}]\n: 1\n", "line 3, column 3"),
        (f"name: &{MARKER} x\nduration: &{MARKER} 1\n", "line 2, column 11"),
        (f"name: x\n---\nname: {MARKER}\n", "line 2, column 1"),
    ],
    ids=[
        "syntax",
        "unterminated-quote",
        "undefined-alias",
        "unknown-tag",
        "bad-int",
        "huge-int",
        "nul",
        "unhashable-key",
        "duplicate-anchor",
        "two-documents",
    ],
)
def test_yaml_errors_give_a_position_and_never_the_documents_text(text: str, position: str) -> None:
    problem = _problem(text)
    assert problem.startswith(f"upload: not valid YAML at {position}: "), problem
    assert MARKER not in problem and MARKER.lower() not in problem.lower()


@pytest.mark.parametrize(
    "text",
    [
        f"name: x\nduration: {MARKER}\n",
        f"name: x\nduration: 1\nwarmup: -{MARKER}\n",
        f"name: x\nduration: 1\nseed: {MARKER}\n",
        f"name: ''\nduration: 1\ndescription: [{MARKER}]\n",
        f"name: x\nduration: 1\nactions: [{{delay: {MARKER}, action: {{type: ''}}}}]\n",
        f"name: x\nduration: 1\nactions: [{MARKER}]\n",
        f"- {MARKER}\n",
        f"{MARKER}\n",
    ],
)
def test_validation_errors_name_the_field_and_never_the_value(text: str) -> None:
    problem = _problem(text)
    assert MARKER not in problem, problem


def test_validation_messages_still_say_what_is_expected() -> None:
    assert _problem(VALID.replace("10s", "soon")) == (
        "upload: duration: not a duration (not a number with a unit; use seconds (90, 0.5) or numbers with units"
        " h, m, s, ms, largest first: 250ms, 1.5m, 1m30s, 2h15m)"
    )
    assert _problem(VALID.replace("10s", "0")) == "upload: duration: Input should be greater than 0"
    assert _problem(VALID + "seed: -1\n") == "upload: seed: Input should be greater than or equal to 0"


def test_load_scenario_never_quotes_the_file(tmp_path: Path) -> None:
    passwd = tmp_path / "passwd"
    passwd.write_text(f"root:x:0:0:{MARKER}:/root:/bin/bash\n")
    broken = tmp_path / "broken.yaml"
    broken.write_text(f"name: {MARKER}\n  duration: {MARKER}: [\n")
    for path in (passwd, broken):
        with pytest.raises(ScenarioError) as caught:
            load_scenario(path)
        assert MARKER not in str(caught.value)


# --- what must keep working ----------------------------------------------------------------------------


def test_every_shipped_scenario_parses_as_plain_safe_load_would(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    paths = sorted((ROOT / "scenarios").glob("*.yaml"))
    assert paths
    for path in paths:
        expected = Scenario.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")))
        assert load_scenario(path) == expected
        assert load_scenario(path, max_bytes=64 * 1024) == expected
        assert resolve_scenario_name(path.stem) == path.resolve()


# --- JSON ----------------------------------------------------------------------------------------------


def test_json_that_yaml_would_misread_is_read_as_json() -> None:
    # json.dumps escapes non-ASCII as \uXXXX surrogate pairs, which PyYAML refuses; 1.5e2 is text to YAML 1.1.
    text = json.dumps({"name": "x", "description": "café ☕ 😀", "duration": 1e1, "load": {"rate": 1.5e2}})
    scenario = parse_scenario(text, "upload")
    assert (scenario.description, scenario.duration, scenario.load) == ("café ☕ 😀", 10.0, {"rate": 150.0})
    # A YAML flow mapping is not JSON and is still read as YAML, unless the source says it is JSON.
    assert parse_scenario("{name: x, duration: 10s}", "upload").duration == 10.0
    assert _problem_from("{name: x, duration: 10s}", "x.json") == (
        "x.json: not valid JSON at line 1, column 2: Expecting property name enclosed in double quotes"
    )


def _problem_from(text: str, source: str) -> str:
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(text, source)
    return "; ".join(caught.value.lines())


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"name": "x", "duration": NaN}', "not valid JSON: NaN, Infinity or a number too long to read"),
        ('{"name": "x", "seed": ' + "9" * 5000 + "}", "not valid JSON: NaN, Infinity or a number too long to read"),
        ('{"name": "x", "load": {"a": ' + "[" * 31 + "]" * 31 + "}}", "refused: nested deeper than 32 levels"),
        ('{"name": "x", "load": {"a": ' + "[" * 5000 + "]" * 5000 + "}}", "refused: nested deeper than 32 levels"),
        ('{"name": "x", "load": {"a": [' + ",".join(["1"] * 100_001) + "]}}", "refused: more than 100000 nodes"),
        (f'{{"name": "{MARKER}", "duration": [1, }}', "not valid JSON at line 1, column "),
    ],
    ids=["nan", "huge-int", "deep", "very-deep", "many-nodes", "syntax"],
)
def test_json_is_held_to_the_yaml_limits_and_quotes_nothing(text: str, problem: str) -> None:
    said = _problem_from(text, "s.json")
    assert said.startswith(f"s.json: {problem}"), said
    assert MARKER not in said


def test_an_unknown_name_close_to_a_scenario_is_404_with_the_closest_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FaultError) as caught:
        resolve_scenario_name("overlaod")
    assert status_of(caught.value) == 404
    assert caught.value.message == "no scenario named 'overlaod' in the scenario directories; did you mean 'overload'?"
