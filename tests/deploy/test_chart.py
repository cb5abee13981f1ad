"""The Helm chart (helm/isrwatch): lint, schema-checked values, rendered manifests validated and read back."""

from __future__ import annotations

import copy
import dataclasses
import json
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml

from isrwatch.cli import build_parser
from isrwatch.state.config import Config
from tests.support.deploy import (
    BIN,
    CHART,
    GRAFANA,
    HELM,
    RUNBOOK_PLACEHOLDER,
    SCHEMAS,
    VALUES,
    alert_rules,
    assert_schema_refuses,
    helm_template,
    render,
    run,
)

VALUE_FILES = sorted(path.name for path in VALUES.glob("*.yaml"))
CUSTOM_KINDS = {
    "SparkApplication": "sparkapplication",
    "ServiceMonitor": "servicemonitor",
    "PrometheusRule": "prometheusrule",
}
STREAM = {"SparkApplication", "ServiceAccount", "Role", "RoleBinding"}
API = {"Deployment", "Service"}
EXPECTED_KINDS = {
    "minimal.yaml": STREAM | API | {"PersistentVolumeClaim", "NetworkPolicy", "ConfigMap"},
    "object-store.yaml": {"SparkApplication"} | API,
    "monitoring.yaml": STREAM | API | {"NetworkPolicy", "ConfigMap", "Ingress", "ServiceMonitor", "PrometheusRule"},
    "api-only.yaml": API | {"NetworkPolicy"},
}
SCHEMA = json.loads((CHART / "values.schema.json").read_text())
DEFAULTS = yaml.safe_load((CHART / "values.yaml").read_text())


def manifests(values_file: str) -> tuple[dict, ...]:
    return helm_template(VALUES / values_file)


def values(values_file: str) -> dict:
    return yaml.safe_load((VALUES / values_file).read_text())


def one(values_file: str, kind: str) -> dict:
    [doc] = [doc for doc in manifests(values_file) if doc["kind"] == kind]
    return doc


def test_every_values_file_has_expectations() -> None:
    assert sorted(EXPECTED_KINDS) == VALUE_FILES


@pytest.mark.parametrize("values_file", VALUE_FILES)
def test_helm_lint_strict(values_file: str) -> None:
    run([HELM, "lint", "--strict", CHART, "--values", VALUES / values_file])


@pytest.mark.parametrize("values_file", VALUE_FILES)
def test_renders_the_objects_the_values_ask_for(values_file: str) -> None:
    assert {doc["kind"] for doc in manifests(values_file)} == EXPECTED_KINDS[values_file]


@pytest.mark.parametrize("version", ["1.25.0", kubernetes_validate.latest_version()])
@pytest.mark.parametrize("values_file", VALUE_FILES)
def test_core_objects_are_valid_kubernetes(values_file: str, version: str) -> None:
    """Strict validation against the bundled OpenAPI schemas of the oldest (Chart.yaml) and newest Kubernetes."""
    for doc in manifests(values_file):
        if doc["kind"] not in CUSTOM_KINDS:
            kubernetes_validate.validate(doc, version, strict=True)


def _check_custom(kind: str, docs: list[dict], tmp_path: Path) -> subprocess.CompletedProcess:
    files = []
    for i, doc in enumerate(docs):
        files.append(tmp_path / f"{kind}-{i}.yaml")
        files[-1].write_text(yaml.safe_dump(doc))
    return subprocess.run(
        [BIN / "check-jsonschema", "--schemafile", SCHEMAS / f"{CUSTOM_KINDS[kind]}.schema.json", *files],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("kind", CUSTOM_KINDS)
def test_custom_resources_match_the_project_schemas(kind: str, tmp_path: Path) -> None:
    docs = [doc for name in VALUE_FILES for doc in manifests(name) if doc["kind"] == kind]
    assert docs, f"no values file renders a {kind}"
    proc = _check_custom(kind, docs, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr


TYPOS = {
    "SparkApplication": ("spec", "driver", "memroy"),
    "ServiceMonitor": ("spec", "endpoints", 0, "intervall"),
    "PrometheusRule": ("spec", "groups", 0, "rules", 0, "annotation"),
}


@pytest.mark.parametrize("kind", CUSTOM_KINDS)
def test_project_schemas_reject_a_misspelt_field(kind: str, tmp_path: Path) -> None:
    doc = copy.deepcopy(one("monitoring.yaml", kind))
    *path, typo = TYPOS[kind]
    node = doc
    for key in path:
        node = node[key]
    node[typo] = "x"
    proc = _check_custom(kind, [doc], tmp_path)
    assert proc.returncode == 1 and typo in proc.stdout, proc.stdout + proc.stderr


BAD_VALUES = {
    "no Kafka bootstrap servers": ("kafka.bootstrapServers=", "kafka.bootstrapServers"),
    "misspelt top-level key": ("serviceMonitr.enabled=true", "serviceMonitr"),
    "unknown sslmode": ("store.sslMode=on", "store.sslMode"),
    "checkpoint URL without a scheme": ("stream.checkpoint.url=bucket/isrwatch", "stream.checkpoint.url"),
    "no state buckets": ("stream.buckets=0", "stream.buckets"),
    "shuffle partitions in sparkConf": ("stream.sparkConf.spark\\.sql\\.shuffle\\.partitions=8", "stream.sparkConf"),
    "trigger as a duration": ("stream.triggerSeconds=10s", "stream.triggerSeconds"),
    "Kubernetes units for Spark memory": ("stream.driver.memory=2Gi", "stream.driver.memory"),
    "unknown isrwatch config key": ("config.replica_lag_ms=1000", "replica_lag_ms"),
    "negative linger": ("config.isr_change_linger_ms=-1", "config.isr_change_linger_ms"),
    "unknown alert to disable": ("prometheusRule.disabledAlerts[0]=IsrwatchNope", "prometheusRule.disabledAlerts.0"),
    "runbook URL ending in /": ("prometheusRule.runbookBaseUrl=https://ops.example/", "prometheusRule.runbookBaseUrl"),
    "label value with a space": ("dashboards.labelValue=a b", "dashboards.labelValue"),
    "port out of range": ("api.port=70000", "api.port"),
    "no password Secret": ("store.passwordSecret.name=", "store.passwordSecret.name"),
    "no PostgreSQL host": ("store.host=", "store.host"),
}


# The demo mode's own values, on the chart's defaults (no values file).
BAD_DEMO_VALUES = {
    "unknown mode": ("mode=staging", "mode"),
    "unknown scenario": ("demo.simulator.scenario=outage", "demo.simulator.scenario"),
    "Kubernetes units for Spark memory": ("demo.stream.driverMemory=1Gi", "demo.stream.driverMemory"),
    "unknown config key": ("demo.config.replica_lag_ms=1", "replica_lag_ms"),
}
BAD = {
    **{case: (v, ("--values", VALUES / "minimal.yaml")) for case, v in BAD_VALUES.items()},
    **{f"demo: {case}": (v, ()) for case, v in BAD_DEMO_VALUES.items()},
}


@pytest.mark.parametrize("case", BAD)
def test_bad_values_fail_at_install_time(case: str) -> None:
    (assignment, field), values = BAD[case]
    assert_schema_refuses(field, *values, "--set", assignment)


def test_values_schema_knows_every_config_key_and_alert() -> None:
    props = SCHEMA["properties"]
    assert set(props["config"]["properties"]) == {f.name for f in dataclasses.fields(Config)}
    assert props["prometheusRule"]["properties"]["disabledAlerts"]["items"]["enum"] == [
        rule["alert"] for rule in alert_rules()
    ]


def _flag(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


@pytest.mark.parametrize("values_file", ["minimal.yaml", "object-store.yaml", "monitoring.yaml"])
def test_stream_is_a_long_running_python_app_with_rocksdb_state(values_file: str) -> None:
    spec = one(values_file, "SparkApplication")["spec"]
    assert (spec["type"], spec["mode"], spec["restartPolicy"]["type"]) == ("Python", "cluster", "Always")
    conf = spec["sparkConf"]
    assert conf["spark.sql.streaming.stateStore.providerClass"].endswith(".RocksDBStateStoreProvider")
    assert conf["spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"] == "true"
    assert _flag(spec["arguments"], "--state-store") == "rocksdb"
    kafka = values(values_file)["kafka"]
    assert _flag(spec["arguments"], "--source") == f"kafka:{kafka['bootstrapServers']}/{','.join(kafka['topics'])}"
    for key, value in values(values_file).get("stream", {}).get("sparkConf", {}).items():
        assert conf[key] == value


@pytest.mark.parametrize("values_file", ["minimal.yaml", "object-store.yaml", "monitoring.yaml"])
def test_stream_arguments_are_an_isrwatch_run_command(values_file: str) -> None:
    """The chart's arguments parse with the real `isrwatch run` parser and carry the values' settings."""
    args = one(values_file, "SparkApplication")["spec"]["arguments"]
    parsed = build_parser().parse_args(args)
    stream = {**DEFAULTS["stream"], **values(values_file).get("stream", {})}
    assert (parsed.command, parsed.state_store, parsed.starting) == ("run", "rocksdb", stream["startingOffsets"])
    assert (parsed.buckets, parsed.shuffle_partitions) == (stream["buckets"], stream["shufflePartitions"])
    assert (parsed.trigger_seconds, parsed.max_per_batch) == (stream["triggerSeconds"], stream["maxPerBatch"])
    config = Config().with_overrides(parsed.set)
    for key, value in values(values_file).get("config", {}).items():
        assert getattr(config, key) == value


def test_checkpoint_on_the_claim_mounted_in_driver_and_executors() -> None:
    spec = one("minimal.yaml", "SparkApplication")["spec"]
    claim = one("minimal.yaml", "PersistentVolumeClaim")
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    assert claim["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    for role in ("driver", "executor"):
        prefix = f"spark.kubernetes.{role}.volumes.persistentVolumeClaim.checkpoint"
        assert spec["sparkConf"][f"{prefix}.options.claimName"] == claim["metadata"]["name"]
        assert _flag(spec["arguments"], "--checkpoint").startswith(spec["sparkConf"][f"{prefix}.mount.path"] + "/")
    existing = one("monitoring.yaml", "SparkApplication")["spec"]["sparkConf"]
    assert (
        existing["spark.kubernetes.executor.volumes.persistentVolumeClaim.checkpoint.options.claimName"]
        == (values("monitoring.yaml")["stream"]["checkpoint"]["persistentVolumeClaim"]["existingClaim"])
    )


def test_checkpoint_in_an_object_store() -> None:
    spec = one("object-store.yaml", "SparkApplication")["spec"]
    assert _flag(spec["arguments"], "--checkpoint") == values("object-store.yaml")["stream"]["checkpoint"]["url"]
    assert not [key for key in spec["sparkConf"] if ".volumes." in key]
    assert spec["hadoopConf"] == values("object-store.yaml")["stream"]["hadoopConf"]
    assert spec["imagePullSecrets"] == ["registry-credentials"]
    assert spec["driver"]["serviceAccount"] == "spark-with-irsa"


@pytest.mark.parametrize("values_file", VALUE_FILES)
def test_store_password_comes_only_from_the_secret(values_file: str) -> None:
    secret = values(values_file)["store"]["passwordSecret"]
    container = one(values_file, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    url = urlsplit(_flag(container["args"], "--store"))
    assert url.scheme == "postgresql" and url.password is None
    env = {e["name"]: e for e in container["env"]}
    assert env["PGPASSWORD"]["valueFrom"]["secretKeyRef"] == {
        "name": secret["name"],
        "key": secret.get("key", "password"),
    }
    sparkapps = [doc for doc in manifests(values_file) if doc["kind"] == "SparkApplication"]
    for app in sparkapps:
        assert _flag(app["spec"]["arguments"], "--store") == url.geturl()
        assert app["spec"]["sparkConf"]["spark.kubernetes.driver.secretKeyRef.PGPASSWORD"] == (
            f"{secret['name']}:{secret.get('key', 'password')}"
        )


@pytest.mark.parametrize("values_file", VALUE_FILES)
def test_api_is_isrwatch_serve_non_root_read_only_and_probed(values_file: str) -> None:
    pod = one(values_file, "Deployment")["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["command"] == ["isrwatch"]
    parsed = build_parser().parse_args(container["args"])
    assert (parsed.command, parsed.host, parsed.port) == ("serve", "0.0.0.0", container["ports"][0]["containerPort"])
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] > 0
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["resources"]["requests"] and container["resources"]["limits"]
    token = {e["name"]: e for e in container["env"]}.get("ISRWATCH_API_TOKEN")
    auth = values(values_file).get("api", {}).get("auth", {})
    assert (token is not None) == bool(auth.get("existingSecret"))


def test_monitoring_objects_select_the_api_with_the_configured_labels() -> None:
    service = one("monitoring.yaml", "Service")
    pod_labels = one("monitoring.yaml", "Deployment")["spec"]["template"]["metadata"]["labels"]
    monitor = one("monitoring.yaml", "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    [endpoint] = monitor["spec"]["endpoints"]
    assert endpoint["port"] in [port["name"] for port in service["spec"]["ports"]]
    assert (endpoint["path"], endpoint["interval"]) == ("/metrics", "15s")
    assert endpoint["authorization"]["credentials"] == {"name": "isrwatch-api-token", "key": "token"}
    policy = one("monitoring.yaml", "NetworkPolicy")["spec"]
    assert policy["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert policy["ingress"] == [
        {
            "ports": [{"port": "http", "protocol": "TCP"}],
            "from": values("monitoring.yaml")["api"]["networkPolicy"]["from"],
        }
    ]
    backends = [
        path["backend"]["service"]
        for rule in one("monitoring.yaml", "Ingress")["spec"]["rules"]
        for path in rule["http"]["paths"]
    ]
    assert backends == [{"name": service["metadata"]["name"], "port": {"name": "http"}}]


def test_prometheus_rule_ships_the_rules_file_minus_disabled_alerts() -> None:
    rule = one("monitoring.yaml", "PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    shipped = [r for group in rule["spec"]["groups"] for r in group["rules"]]
    expected = [
        {
            **r,
            "labels": {**r["labels"], "team": "kafka"},
            "annotations": _runbooks_at(r, "https://isrwatch.kafka.example.com"),
        }
        for r in alert_rules()
        if r["alert"] != "IsrwatchWatermarkLagHigh"
    ]
    assert shipped == expected  # the runbooks on the API's ingress (with TLS), its first host


def _runbooks_at(rule: dict, base: str) -> dict:
    """The rule's annotations with its runbook_url on `base` instead of the rules file's placeholder."""
    url = rule["annotations"]["runbook_url"]
    assert url.startswith(RUNBOOK_PLACEHOLDER + "/runbooks#")
    return {**rule["annotations"], "runbook_url": base + url.removeprefix(RUNBOOK_PLACEHOLDER)}


@pytest.mark.parametrize(
    ("args", "base"),
    [
        ((), "http://isrwatch-api.default.svc:8000"),  # no ingress: the API's Service
        (("--set", "api.ingress.enabled=true"), "http://isrwatch.example.com"),  # its first host, no TLS
        (
            ("--set", "prometheusRule.runbookBaseUrl=https://ops.example.org/kafka/isrwatch"),
            "https://ops.example.org/kafka/isrwatch",
        ),
    ],
)
def test_alerts_link_their_runbook_on_the_api(args: tuple[str, ...], base: str) -> None:
    proc = render("--set", "prometheusRule.enabled=true", *args)
    assert proc.returncode == 0, proc.stderr
    [rule] = [d for d in yaml.safe_load_all(proc.stdout) if d and d["kind"] == "PrometheusRule"]
    shipped = {r["alert"]: r["annotations"] for group in rule["spec"]["groups"] for r in group["rules"]}
    assert shipped == {r["alert"]: _runbooks_at(r, base) for r in alert_rules()}


def test_one_dashboard_configmap_per_dashboard_for_the_grafana_sidecar() -> None:
    maps = [doc for doc in manifests("monitoring.yaml") if doc["kind"] == "ConfigMap"]
    files = sorted(path.name for path in GRAFANA.glob("*.json"))
    assert sorted(name for cm in maps for name in cm["data"]) == files and len(maps) == len(files)
    for cm in maps:
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert cm["metadata"]["annotations"] == {"grafana_folder": "Kafka"}
        assert cm["metadata"]["namespace"] == "monitoring"
        [(name, text)] = cm["data"].items()
        assert json.loads(text) == json.loads((GRAFANA / name).read_text())
