"""The chart's two modes: the demo it installs with no values, and the values production mode insists on."""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml

from isrwatch.cli import build_parser
from isrwatch.sim.faults import SCENARIOS
from isrwatch.state.config import Config
from tests.support.deploy import CHART, HELM, VALUES, helm_template, render, run

SCHEMA = json.loads((CHART / "values.schema.json").read_text())
DEFAULTS = yaml.safe_load((CHART / "values.yaml").read_text())
PRODUCTION_KINDS = {
    "SparkApplication",
    "ServiceMonitor",
    "PrometheusRule",
    "PersistentVolumeClaim",
    "ServiceAccount",
    "Role",
    "RoleBinding",
}


def demo() -> tuple[dict, ...]:
    """The chart rendered with its defaults: the demo."""
    return helm_template()


def component(kind: str, name: str) -> dict:
    [doc] = [
        doc
        for doc in demo()
        if doc["kind"] == kind and doc["metadata"]["labels"]["app.kubernetes.io/component"] == name
    ]
    return doc


def containers() -> dict[str, dict]:
    """The demo pod's containers by name, in their order."""
    return {c["name"]: c for c in component("Deployment", "demo")["spec"]["template"]["spec"]["containers"]}


def _flag(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def _env(container: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container.get("env", ())}


def test_defaults_pass_helm_lint_strict() -> None:
    run([HELM, "lint", "--strict", CHART])


def test_defaults_install_the_demo_without_custom_resources() -> None:
    """No values: a demo pod, its database Service and Secret, the API; nothing a plain cluster lacks the CRDs of."""
    kinds = sorted(doc["kind"] for doc in demo())
    assert kinds == sorted(
        ["Deployment", "Deployment", "Service", "Service", "Secret", "NetworkPolicy", *["ConfigMap"] * 4]
    )
    assert not PRODUCTION_KINDS & set(kinds)
    assert list(containers()) == ["postgresql", "simulator", "stream"]


@pytest.mark.parametrize("version", ["1.25.0", kubernetes_validate.latest_version()])
def test_demo_objects_are_valid_kubernetes(version: str) -> None:
    for doc in demo():
        kubernetes_validate.validate(doc, version, strict=True)


def test_demo_simulator_feeds_the_stream_with_the_same_configuration() -> None:
    """The simulator and the stream are real `isrwatch simulate` / `isrwatch run` command lines: the stream reads
    the directory the simulator writes, on the volume both mount, and judges with the brokers' settings."""
    pod = containers()
    simulator = build_parser().parse_args(pod["simulator"]["args"])
    stream = build_parser().parse_args(pod["stream"]["args"])
    assert pod["simulator"]["command"] == pod["stream"]["command"] == ["isrwatch"]
    assert (simulator.command, simulator.scenario, simulator.speed, simulator.duration) == (
        "simulate",
        DEFAULTS["demo"]["simulator"]["scenario"],
        1.0,
        "0",
    )
    assert (stream.command, stream.source) == ("run", f"files:{simulator.out_dir}")
    mounts = [{m["mountPath"]: m["name"] for m in pod[name]["volumeMounts"]} for name in ("simulator", "stream")]
    assert mounts[0] == mounts[1]
    [(shared, _)] = mounts[0].items()
    assert simulator.out_dir.startswith(shared + "/") and stream.checkpoint.startswith(shared + "/")
    config = Config().with_overrides(simulator.set)
    assert Config().with_overrides(stream.set) == config
    for key, value in DEFAULTS["demo"]["config"].items():
        assert getattr(config, key) == value
    assert (stream.trigger_seconds, stream.driver_memory) == (
        DEFAULTS["demo"]["stream"]["triggerSeconds"],
        DEFAULTS["demo"]["stream"]["driverMemory"],
    )


def test_config_values_win_over_the_demo_config() -> None:
    pod = {
        c["name"]: c
        for doc in helm_template(sets=("config.replica_lag_time_max_ms=20000",))
        if doc["kind"] == "Deployment"
        for c in doc["spec"]["template"]["spec"]["containers"]
    }
    for name in ("simulator", "stream"):
        config = Config().with_overrides(build_parser().parse_args(pod[name]["args"]).set)
        assert (config.replica_lag_time_max_ms, config.schedule_origin_ms) == (20000, 0)


def test_demo_database_wiring_is_one_url_and_one_secret() -> None:
    """The API reaches the demo pod's PostgreSQL through the Service, the stream beside it on loopback; user,
    database, port and password Secret agree with what the database container is started with."""
    pod = containers()
    database = pod["postgresql"]
    db_env = _env(database)
    [port] = database["ports"]
    service = component("Service", "demo")
    secret = component("Secret", "demo")
    api = component("Deployment", "api")["spec"]["template"]
    [api_container] = api["spec"]["containers"]
    assert build_parser().parse_args(api_container["args"]).command == "serve"
    api_url = urlsplit(_flag(api_container["args"], "--store"))
    stream_url = urlsplit(_flag(pod["stream"]["args"], "--store"))
    [service_port] = service["spec"]["ports"]
    assert service_port["targetPort"] == port["name"] and port["containerPort"] == 5432
    assert (api_url.hostname, api_url.port) == (service["metadata"]["name"], service_port["port"])
    assert (stream_url.hostname, stream_url.port) == ("127.0.0.1", port["containerPort"])
    for url in (api_url, stream_url):
        assert url.scheme == "postgresql" and url.password is None
        assert (url.username, url.path) == (db_env["POSTGRES_USER"]["value"], f"/{db_env['POSTGRES_DB']['value']}")
    reference = db_env["POSTGRES_PASSWORD"]["valueFrom"]["secretKeyRef"]
    assert reference == {"name": secret["metadata"]["name"], "key": "password"}
    assert len(base64.b64decode(secret["data"]["password"])) == 32
    for container in (api_container, pod["stream"]):
        assert _env(container)["PGPASSWORD"]["valueFrom"]["secretKeyRef"] == reference
    demo_labels = component("Deployment", "demo")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= demo_labels.items()
    assert not service["spec"]["selector"].items() <= api["metadata"]["labels"].items()


def test_demo_pod_starts_its_database_first_and_keeps_nothing() -> None:
    """The stream opens the store when it starts: PostgreSQL comes first and holds the others back (postStart)
    until it accepts connections. Every volume is an emptyDir, so the database and checkpoint go together."""
    spec = component("Deployment", "demo")["spec"]
    database = containers()["postgresql"]
    assert "pg_isready" in database["lifecycle"]["postStart"]["exec"]["command"][-1]
    assert "pg_isready" in database["readinessProbe"]["exec"]["command"]
    assert (spec["replicas"], spec["strategy"]["type"]) == (1, "Recreate")
    assert all("emptyDir" in volume for volume in spec["template"]["spec"]["volumes"])
    for container in containers().values():
        context = container["securityContext"]
        assert context["runAsNonRoot"] is True and context["runAsUser"] > 0
        assert context["allowPrivilegeEscalation"] is False and context["capabilities"]["drop"] == ["ALL"]
        assert container["resources"]["requests"] and container["resources"]["limits"]


def test_demo_schema_knows_the_simulator_scenarios_and_every_config_key() -> None:
    demo_schema = SCHEMA["properties"]["demo"]["properties"]
    assert set(demo_schema["simulator"]["properties"]["scenario"]["enum"]) == set(SCENARIOS)
    assert demo_schema["config"] == {"$ref": "#/properties/config"}


def _render_notes(tmp_path: Path, *args: str) -> str:
    """NOTES.txt as `helm install` prints it. Helm 3.17's `install --dry-run=client` still needs a cluster
    (helm/helm#13144), so a copy of the chart renders the same text through `helm template`."""
    chart = tmp_path / "isrwatch"
    shutil.copytree(CHART, chart)
    notes = (chart / "templates" / "NOTES.txt").read_text()
    (chart / "templates" / "_notes_under_test.tpl").write_text(
        '{{- define "notes-under-test" -}}\n' + notes + "\n{{- end -}}\n"
    )
    (chart / "templates" / "notes-under-test.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\n"
        'data:\n  notes: {{ include "notes-under-test" . | toJson }}\n'
    )
    out = run(
        [
            HELM,
            "template",
            "isrwatch",
            chart,
            "--namespace",
            "kafka-monitoring",
            "--show-only",
            "templates/notes-under-test.yaml",
            *args,
        ]
    ).stdout
    return yaml.safe_load(out)["data"]["notes"]


def test_notes_say_it_is_a_demo_and_how_to_go_to_production(tmp_path: Path) -> None:
    notes = _render_notes(tmp_path)
    assert "THIS IS A DEMO" in notes and "SIMULATED" in notes and "THROWAWAY" in notes
    assert "port-forward svc/isrwatch-api 8000" in notes
    assert "mode: production" in notes
    for value in ("kafka.bootstrapServers", "kafka.topics", "store.host", "store.passwordSecret.name"):
        assert value in notes
    production = _render_notes(tmp_path / "production", "--values", str(VALUES / "minimal.yaml"))
    assert "DEMO" not in production and "get sparkapplication isrwatch-stream" in production


# Besides test_chart's BAD_VALUES (no bootstrap servers, PostgreSQL host or password Secret: the schema's rules).
REQUIRED_IN_PRODUCTION = {
    "kafka.topics": ("--set-json", "kafka.topics=[]"),
    "stream.serviceAccount.name": ("--set", "stream.serviceAccount.create=false"),
}


@pytest.mark.parametrize("value", REQUIRED_IN_PRODUCTION)
def test_production_fails_at_install_time_naming_a_missing_value(value: str) -> None:
    proc = render("--values", VALUES / "minimal.yaml", *REQUIRED_IN_PRODUCTION[value])
    assert proc.returncode != 0 and value in proc.stderr, proc.stderr


def test_production_without_values_names_every_required_value() -> None:
    proc = render("--set", "mode=production")
    assert proc.returncode != 0
    for value in ("kafka.bootstrapServers", "kafka.topics", "store.host", "store.passwordSecret.name"):
        assert value in proc.stderr, proc.stderr


def test_api_alone_in_production_needs_no_kafka() -> None:
    kinds = {
        doc["kind"]
        for doc in helm_template(
            sets=("mode=production", "stream.enabled=false", "store.host=pg", "store.passwordSecret.name=pg")
        )
    }
    assert kinds == {"Deployment", "Service", "NetworkPolicy", "ConfigMap"}


@pytest.mark.parametrize("values_file", sorted(path.name for path in VALUES.glob("*.yaml")))
def test_production_values_without_the_mode_fail_instead_of_installing_the_demo(values_file: str) -> None:
    """A values file written before `mode` existed must not turn a production release into the demo."""
    proc = render("--values", VALUES / values_file, "--set", "mode=demo")
    assert proc.returncode != 0 and "mode: production" in proc.stderr, proc.stderr
    given = yaml.safe_load((VALUES / values_file).read_text())
    assert "store.host" in proc.stderr and given["store"]["host"]
