"""The standard OTEL_* variables: a value the SDK would quietly replace by its default is refused, naming the
variable and never quoting a secret; the gRPC exporter is loaded only when asked for, and its absence is said so;
the resource is chaosd's (with its version) under what the operator's variables say."""

from __future__ import annotations

import subprocess
import sys

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

from chaosd.core.errors import ConfigError
from chaosd.core.version import __version__
from chaosd.exporters.otel_env import read_otel_env, resource
from chaosd.exporters.tracing import otlp_exporter_from_env

ENDPOINT = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}
SECRET = "api-key-d41d8cd98f00b204"


@pytest.mark.parametrize(
    ("env", "variable", "says"),
    [
        ({"OTEL_TRACES_SAMPLER": "sometimes"}, "OTEL_TRACES_SAMPLER", "one of always_on"),
        ({"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"}, "OTEL_TRACES_SAMPLER_ARG", "0 to 1"),
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf or grpc"),
        ({"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "udp"}, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf or grpc"),
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER", "otlp or none"),
        ({"OTEL_SDK_DISABLED": "yes"}, "OTEL_SDK_DISABLED", "true or false"),
        ({"OTEL_BSP_MAX_QUEUE_SIZE": "-1"}, "OTEL_BSP_MAX_QUEUE_SIZE", "whole number > 0"),
        ({"OTEL_BSP_SCHEDULE_DELAY": "soon"}, "OTEL_BSP_SCHEDULE_DELAY", "whole number > 0"),
        (
            {"OTEL_BSP_MAX_QUEUE_SIZE": "10", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "20"},
            "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
            "",
        ),
        ({"OTEL_EXPORTER_OTLP_TIMEOUT": "0"}, "OTEL_EXPORTER_OTLP_TIMEOUT", "seconds > 0"),
    ],
)
def test_a_value_that_cannot_be_used_is_refused_naming_the_variable(
    env: dict[str, str], variable: str, says: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        read_otel_env({**ENDPOINT, **env})
    ((source, name, message),) = refused.value.problems
    assert (source, name) == ("environment", variable) and says in message


@pytest.mark.parametrize(
    "env",
    [
        {"OTEL_EXPORTER_OTLP_HEADERS": f"x-api-key={SECRET},broken {SECRET}"},  # an entry with no =
        {"OTEL_EXPORTER_OTLP_TRACES_HEADERS": f'authorization="Bearer {SECRET}"'},  # quotes are not allowed
        {"OTEL_EXPORTER_OTLP_ENDPOINT": f"collector:4318/{SECRET}"},  # no scheme
    ],
)
def test_a_malformed_secret_is_refused_without_being_quoted(env: dict[str, str]) -> None:
    with pytest.raises(ConfigError) as refused:
        read_otel_env({**ENDPOINT, **env})
    assert SECRET not in str(refused.value) and "not shown" in str(refused.value)


def test_what_is_exported_follows_the_variables() -> None:
    assert otlp_exporter_from_env({}) is None  # no endpoint: nothing exported, nothing spent
    assert otlp_exporter_from_env({"OTEL_TRACES_SAMPLER": "another program's"}) is None  # and nothing else read
    assert isinstance(otlp_exporter_from_env(ENDPOINT), HttpExporter)  # http/protobuf by default
    assert otlp_exporter_from_env({**ENDPOINT, "OTEL_SDK_DISABLED": "true"}) is None
    assert otlp_exporter_from_env({**ENDPOINT, "OTEL_TRACES_EXPORTER": "none"}) is None
    headers = {**ENDPOINT, "OTEL_EXPORTER_OTLP_HEADERS": f"x-api-key={SECRET},x-team=a%20b"}
    assert read_otel_env(headers).exporting  # well-formed headers pass
    sized = read_otel_env({**ENDPOINT, "OTEL_BSP_MAX_QUEUE_SIZE": "100"})
    assert (sized.queue, sized.batch) == (100, 100)


def test_the_default_path_never_imports_grpc_and_a_missing_grpc_exporter_names_the_setting_and_the_extra() -> None:
    code = (
        "import sys\n"
        "sys.modules['opentelemetry.exporter.otlp.proto.grpc'] = None  # as if the extra were not installed\n"
        "from chaosd.exporters.tracing import otlp_exporter_from_env\n"
        "from chaosd.core.errors import ConfigError\n"
        "print(type(otlp_exporter_from_env({'OTEL_EXPORTER_OTLP_ENDPOINT': 'http://127.0.0.1:4318'})).__module__)\n"
        "print(any('grpc' in name for name in sys.modules if sys.modules[name] is not None))\n"
        "try:\n"
        "    otlp_exporter_from_env({'OTEL_EXPORTER_OTLP_ENDPOINT': 'http://127.0.0.1:4317',"
        " 'OTEL_EXPORTER_OTLP_PROTOCOL': 'grpc'})\n"
        "except ConfigError as exc:\n"
        "    print(exc.lines()[0])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    module, grpc_loaded, message = done.stdout.strip().split("\n")
    assert module == "opentelemetry.exporter.otlp.proto.http.trace_exporter" and grpc_loaded == "False"
    assert message.startswith("environment: OTEL_EXPORTER_OTLP_PROTOCOL: grpc needs the gRPC exporter")
    assert "pip install 'chaosd[otlp-grpc]'" in message


def test_the_resource_is_chaosds_with_its_version_under_the_operators_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    plain = resource({"process.pid": 7}).attributes
    assert (plain["service.name"], plain["service.version"], plain["process.pid"]) == ("chaosd", __version__, 7)
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.name=from-attributes,deployment.environment.name=prod")
    assert resource({}).attributes["service.name"] == "from-attributes"
    monkeypatch.setenv("OTEL_SERVICE_NAME", "from-name")  # the specification's order: the name variable wins
    named = resource({}).attributes
    assert named["service.name"] == "from-name" and named["deployment.environment.name"] == "prod"
