"""The Helm chart, rendered and linted with Helm's own Go engine (``helm-python-sdk``), every
manifest validated strictly against Kubernetes' OpenAPI schemas (``kubernetes-validate``; the
Prometheus Operator's CRDs against the subsets in ``artefacts.py`` and ``crds.py``), and the
configuration each rendering gives the pod loaded by pgbridge's own loader. Split from
test_artefacts.py, which checks the Dockerfile, Compose, Prometheus, Grafana and the docs."""


from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from tests.deploy.artefacts import (
    CHART_CI_VALUES,
    CHART_DIR,
    HTTP_PORT,
    NAMESPACE,
    OLDEST_KUBERNETES,
    RELEASE,
    REPO_ROOT,
    SERVICEMONITOR_SCHEMA,
    SPILL_DIR,
    dockerfile_final_stage,
    load_settings,
    require,
)
from tests.deploy.crds import PROMETHEUSRULE_SCHEMA

# ----------------------------------------------------------------------------------------------
# Helm chart


def _helm() -> ModuleType:
    return require("helm_python", "helm-python-sdk")


def _render(values: dict[str, Any] | None) -> dict[str, str]:
    helm = _helm()
    with helm.Chart.load(str(CHART_DIR)) as chart:
        rendered: dict[str, str] = chart.render(values or {}, name=RELEASE, namespace=NAMESPACE)
    return rendered


def _manifests(rendered: dict[str, str]) -> list[dict[str, Any]]:
    documents = []
    for path, text in sorted(rendered.items()):
        if not path.endswith(".yaml"):
            continue
        for document in yaml.safe_load_all(text):
            if document is not None:
                assert isinstance(document, dict), f"{path} renders a non-mapping document"
                documents.append(document)
    return documents


def _values_cases() -> Iterator[Any]:
    yield pytest.param(None, id="default")
    for path in CHART_CI_VALUES:
        yield pytest.param(path, id=path.stem)


def _load_values(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    values = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    assert isinstance(values, dict)
    return values


def _one(documents: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [document for document in documents if document["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def _container(documents: list[dict[str, Any]], kind: str = "Deployment") -> dict[str, Any]:
    """pgbridge's container (a pod may have sidecars: extraContainers)."""
    containers = _one(documents, kind)["spec"]["template"]["spec"]["containers"]
    if kind == "Deployment":
        assert containers[0]["name"] == "pgbridge", "pgbridge's container comes first"
    container: dict[str, Any] = containers[0]
    return container


def _image_env() -> dict[str, str]:
    """The PGBRIDGE_* variables the image's runtime stage sets (ENV): the container starts with them,
    and a variable the pod spec sets replaces the image's."""
    env: dict[str, str] = {}
    for keyword, arguments in dockerfile_final_stage():
        if keyword == "ENV":
            for item in shlex.split(arguments):
                name, _, value = item.partition("=")
                if name.startswith("PGBRIDGE_"):
                    env[name] = value
    return env


def _effective_env(container: dict[str, Any]) -> dict[str, str]:
    """The container's environment as pgbridge sees it: the image's ENV, then the pod spec's env in
    order (Secret references replaced by placeholders)."""
    env = _image_env()
    for item in container["env"]:
        if "value" in item:
            env[item["name"]] = item["value"]
        else:
            ref = item["valueFrom"]["secretKeyRef"]
            env[item["name"]] = f"postgresql://secret-{ref['name']}-{ref['key']}@db/app" \
                if item["name"] == "PGBRIDGE_POSTGRES__DSN" else f"secret-{ref['name']}-{ref['key']}"
    return env


def _pod_settings(documents: list[dict[str, Any]], tmp_path: Path, kind: str = "Deployment") -> Any:
    """pgbridge's settings in the rendered pod: the image's and the pod's environment plus the
    ConfigMap's file, loaded by pgbridge's own loader."""
    config_map = _one(documents, "ConfigMap")
    container = _container(documents, kind)
    env = {name: value for name, value in _effective_env(container).items() if name.startswith("PGBRIDGE_")}
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == env["PGBRIDGE_CONFIG"])
    config_file = tmp_path / mount["subPath"]
    config_file.write_text(config_map["data"][mount["subPath"]], encoding="utf-8")
    env["PGBRIDGE_CONFIG"] = str(config_file)
    return load_settings(None, env)


def test_chart_ci_values_include_a_servicemonitor_case() -> None:
    assert any(_load_values(path).get("serviceMonitor", {}).get("enabled") for path in CHART_CI_VALUES), (
        "helm/pgbridge/ci/ needs a values file with serviceMonitor.enabled: true"
    )


def test_chart_values_yaml_matches_values_schema() -> None:
    jsonschema = require("jsonschema", "jsonschema")
    schema = json.loads((CHART_DIR / "values.schema.json").read_text(encoding="utf-8"))
    jsonschema.Draft7Validator.check_schema(schema)
    validator = jsonschema.Draft7Validator(schema)
    for source in [CHART_DIR / "values.yaml", *CHART_CI_VALUES]:
        values = yaml.safe_load(source.read_text(encoding="utf-8"))
        if source.parent.name == "ci":
            # Helm validates user values merged over the defaults: check the same way.
            with _helm().Chart.load(str(CHART_DIR)) as chart:
                values = chart.merge_values(values)
        errors = list(validator.iter_errors(values))
        report = "\n".join(f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors)
        assert not errors, f"{source.relative_to(REPO_ROOT)} does not match values.schema.json:\n{report}"


@pytest.mark.parametrize("values_file", list(_values_cases()))
def test_chart_passes_helm_lint(values_file: Path | None) -> None:
    helm = _helm()
    report = helm.lint(str(CHART_DIR), _load_values(values_file), strict=True, namespace=NAMESPACE)
    # Severity: 1 info, 2 warning, 3 error. The only info Helm reports is "icon is recommended".
    problems = [m for m in report["messages"] if m["severity"] >= 2] + [
        {"path": "", "error": e} for e in report["errors"]]
    assert not problems, "helm lint:\n" + "\n".join(f"{m['path']}: {m['error']}" for m in problems)


@pytest.mark.parametrize("values_file", list(_values_cases()))
def test_chart_renders_manifests_valid_for_kubernetes(values_file: Path | None) -> None:
    kubernetes_validate = require("kubernetes_validate", "kubernetes-validate")
    jsonschema = require("jsonschema", "jsonschema")
    documents = _manifests(_render(_load_values(values_file)))
    kinds = {document["kind"] for document in documents}
    assert {"Deployment", "ConfigMap", "Service", "ServiceAccount", "PodDisruptionBudget"} <= kinds
    versions = (OLDEST_KUBERNETES, kubernetes_validate.latest_version())
    problems = []
    for document in documents:
        name = f"{document['kind']}/{document['metadata']['name']}"
        crd_schema = {"ServiceMonitor": SERVICEMONITOR_SCHEMA,
                      "PrometheusRule": PROMETHEUSRULE_SCHEMA}.get(document["kind"])
        if crd_schema is not None:
            for error in jsonschema.Draft7Validator(crd_schema).iter_errors(document):
                problems.append(f"{name}: {'/'.join(map(str, error.absolute_path))}: {error.message}")
            continue
        for version in versions:
            try:
                kubernetes_validate.validate(document, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                where = "/".join(map(str, exc.absolute_path)) or "(root)"
                problems.append(f"{name} (Kubernetes {version}): {where}: {exc.message}")
            except kubernetes_validate.SchemaNotFoundError as exc:
                problems.append(f"{name} (Kubernetes {version}): no schema: {exc}")
    assert not problems, "invalid manifests:\n" + "\n".join(problems)


def test_chart_runs_at_most_one_streaming_pod() -> None:
    documents = _manifests(_render(None))
    deployment = _one(documents, "Deployment")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    pdb = _one(documents, "PodDisruptionBudget")
    assert "minAvailable" not in pdb["spec"], "minAvailable on a single pod would block node drains"
    assert pdb["spec"]["maxUnavailable"] == 1
    # a pod that is not Ready (Kafka unreachable) never holds a drain up
    assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    assert pdb["spec"]["selector"] == deployment["spec"]["selector"]


def test_chart_refuses_a_second_consumer_unless_active_standby() -> None:
    helm = _helm()
    with pytest.raises(helm.HelmError, match="replicaCount"):
        _render({"replicaCount": 2})
    deployment = _one(_manifests(_render({"replicaCount": 2, "activeStandby": {"enabled": True}})), "Deployment")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}


def test_chart_schema_keeps_secrets_out_of_the_configmap() -> None:
    helm = _helm()
    for values in (
        {"config": {"postgres": {"dsn": "postgresql://pgbridge:pw@db/app"}}},
        {"config": {"kafka": {"properties": {"sasl.password": "pw"}}}},
        {"config": {"schema_registry": {"basic_auth_user_info": "user:pw"}}},
        {"unknownTopLevelKey": True},
    ):
        with pytest.raises(helm.HelmError):
            _render(values)


def test_chart_pod_is_hardened_and_probed() -> None:
    documents = _manifests(_render(None))
    pod = _one(documents, "Deployment")["spec"]["template"]["spec"]
    container = _container(documents)
    assert container["args"] == ["run"], "the image's ENTRYPOINT is pgbridge; the chart runs `pgbridge run`"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["automountServiceAccountToken"] is False
    # Service links would inject PGBRIDGE_PORT & co. for a Service named pgbridge, which the
    # configuration loader rejects as unknown settings.
    assert pod["enableServiceLinks"] is False
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    # health.py: /healthz fails only a wedged pipeline, /readyz is alive and doing its job (ready while
    # snapshotting or standing by too), the startup probe holds both off until the server answers.
    assert container["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["startupProbe"]["periodSeconds"] * container["startupProbe"]["failureThreshold"] >= 120
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert container["ports"] == [{"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"}]
    assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    mounts = {mount["mountPath"]: mount["name"] for mount in container["volumeMounts"]}
    assert "emptyDir" in volumes[mounts[SPILL_DIR]], "the spill directory needs a writable emptyDir"
    assert "emptyDir" in volumes[mounts["/tmp"]], "/tmp needs a writable emptyDir (read-only root filesystem)"


def test_chart_takes_credentials_only_from_secrets() -> None:
    values = _load_values(CHART_DIR / "ci" / "production-values.yaml")
    rendered = _render(values)
    env = {item["name"]: item for item in _container(_manifests(rendered))["env"]}
    expected_refs = {
        "PGBRIDGE_POSTGRES__DSN": ("pgbridge-postgres", "dsn"),
        "PGBRIDGE_KAFKA__PROPERTIES__SASL.PASSWORD": ("pgbridge-kafka", "sasl-password"),
        "PGBRIDGE_SCHEMA_REGISTRY__BASIC_AUTH_USER_INFO": ("pgbridge-registry", "basic-auth-user-info"),
    }
    for name, (secret, key) in expected_refs.items():
        assert "value" not in env[name], f"{name} must come from a Secret"
        assert env[name]["valueFrom"]["secretKeyRef"] == {"name": secret, "key": key}
    assert not any(kind == "Secret" for kind in (d["kind"] for d in _manifests(rendered))), (
        "the chart references Secrets and never creates one"
    )
    default_env = {item["name"]: item for item in _container(_manifests(_render(None)))["env"]}
    assert default_env["PGBRIDGE_POSTGRES__DSN"]["valueFrom"]["secretKeyRef"] == {
        "name": f"{RELEASE}-pgbridge-postgres", "key": "dsn"}


@pytest.mark.parametrize("values_file", list(_values_cases()))
def test_chart_configuration_is_a_valid_pgbridge_configuration(values_file: Path | None, tmp_path: Path) -> None:
    documents = _manifests(_render(_load_values(values_file)))
    container = _container(documents)
    # The image's ENV is part of the pod's environment, and the environment wins over the file.
    settings = _pod_settings(documents, tmp_path)
    assert settings.http.port == container["ports"][0]["containerPort"]
    spill_mount = next(m for m in container["volumeMounts"] if m["name"] == "spill")
    assert str(settings.buffer.spill_dir) == spill_mount["mountPath"]
    if _load_values(values_file).get("activeStandby", {}).get("enabled"):
        assert settings.ha.leader_election is True
    annotations = _one(documents, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert re.fullmatch(r"[0-9a-f]{64}", annotations["checksum/config"]), "config changes must roll the pod"


def test_chart_ci_values_cover_the_deployment_variants() -> None:
    values = {path.stem: _load_values(path) for path in CHART_CI_VALUES}
    assert any(v.get("activeStandby", {}).get("enabled") and v.get("replicaCount", 1) > 1 for v in values.values()), (
        "helm/pgbridge/ci/ needs an active/standby values file"
    )
    assert any(v.get("spill", {}).get("mountPath", SPILL_DIR) != SPILL_DIR for v in values.values()), (
        "helm/pgbridge/ci/ needs a values file that moves the spill directory away from the image's default"
    )
    assert any(v.get("networkPolicy", {}).get("enabled") for v in values.values()), "no NetworkPolicy case"
    assert any(v.get("slotDrop", {}).get("enabled") for v in values.values()), "no decommission case"
    assert any(v.get("prometheusRule", {}).get("enabled") for v in values.values()), "no PrometheusRule case"


def test_chart_spill_dir_is_one_setting_that_wins_over_the_image(tmp_path: Path) -> None:
    # The image sets PGBRIDGE_BUFFER__SPILL_DIR; the environment wins over the configuration file, so
    # the chart's spill.mountPath must reach pgbridge as that variable, not only in the file.
    assert _image_env()["PGBRIDGE_BUFFER__SPILL_DIR"] == SPILL_DIR
    documents = _manifests(_render({"spill": {"mountPath": "/data/spill"}}))
    assert str(_pod_settings(documents, tmp_path).buffer.spill_dir) == "/data/spill"
    mounts = {m["name"]: m["mountPath"] for m in _container(documents)["volumeMounts"]}
    assert mounts["spill"] == "/data/spill"
    config = yaml.safe_load(_one(documents, "ConfigMap")["data"]["pgbridge.yaml"])
    assert "spill_dir" not in config.get("buffer", {}), "one source: spill.mountPath, as the environment"
    # config.buffer.spill_dir (and config.http.port) would be silently overridden: the schema refuses them.
    helm = _helm()
    for values in ({"config": {"buffer": {"spill_dir": "/elsewhere"}}}, {"config": {"http": {"port": 1}}}):
        with pytest.raises(helm.HelmError):
            _render(values)
    assert str(_pod_settings(_manifests(_render({"config": {"buffer": {"memory_bytes": 4096}}})), tmp_path)
               .buffer.memory_bytes) == "4096"


def test_chart_active_standby_turns_on_leader_election_and_spreads(tmp_path: Path) -> None:
    values = _load_values(CHART_DIR / "ci" / "standby-values.yaml")
    documents = _manifests(_render(values))
    deployment = _one(documents, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    settings = _pod_settings(documents, tmp_path)
    assert settings.ha.leader_election is True
    assert settings.ha.standby_retry_s == 2
    constraints = deployment["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert [c["topologyKey"] for c in constraints] == ["kubernetes.io/hostname", "topology.kubernetes.io/zone"]
    for constraint in constraints:
        assert constraint["labelSelector"] == deployment["spec"]["selector"], "spread this release's pods"
    # Leader election is what makes extra replicas standbys: it cannot be turned off with activeStandby.
    with pytest.raises(_helm().HelmError, match="leader"):
        _render({**values, "config": {"kafka": {"bootstrap_servers": "k:9092"}, "ha": {"leader_election": False}}})
    # an explicit labelSelector is kept
    own = {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
           "labelSelector": {"matchLabels": {"team": "cdc"}}}
    spread = _one(_manifests(_render({"topologySpreadConstraints": [own]})), "Deployment")
    assert spread["spec"]["template"]["spec"]["topologySpreadConstraints"] == [own]


def test_chart_extras_reach_the_pod() -> None:
    values = _load_values(CHART_DIR / "ci" / "spill-values.yaml")
    documents = _manifests(_render(values))
    pod = _one(documents, "Deployment")["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["containers"]] == ["pgbridge", "log-shipper"]
    assert [c["name"] for c in pod["initContainers"]] == ["wait-for-dns"]
    env = {item["name"]: item.get("value") for item in pod["containers"][0]["env"]}
    assert env["TZ"] == "UTC" and env["PGBRIDGE_LOG__LEVEL"] == "DEBUG"
    assert "shared-logs" in {v["name"] for v in pod["volumes"]}
    assert "/var/log/pgbridge" in {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert pod["containers"][0]["ports"][0]["containerPort"] == 9464
    default_pod = _one(_manifests(_render(None)), "Deployment")["spec"]["template"]["spec"]
    assert len(default_pod["containers"]) == 1 and "initContainers" not in default_pod


def test_chart_networkpolicy_limits_ingress_to_http_and_egress_to_the_servers() -> None:
    assert not [d for d in _manifests(_render(None)) if d["kind"] == "NetworkPolicy"]
    values = _load_values(CHART_DIR / "ci" / "networkpolicy-values.yaml")
    documents = _manifests(_render(values))
    policy = _one(documents, "NetworkPolicy")["spec"]
    deployment = _one(documents, "Deployment")
    assert policy["podSelector"] == deployment["spec"]["selector"]
    assert set(policy["policyTypes"]) == {"Ingress", "Egress"}
    (ingress,) = policy["ingress"]
    assert ingress["ports"] == [{"port": HTTP_PORT, "protocol": "TCP"}]
    assert ingress["from"] == values["networkPolicy"]["ingress"]["from"]
    egress = policy["egress"]
    ports = [sorted((p["port"], p["protocol"]) for p in rule["ports"]) for rule in egress]
    assert ports == [[(53, "TCP"), (53, "UDP")], [(5432, "TCP")], [(9092, "TCP"), (9093, "TCP")], [(8081, "TCP")],
                     [(4317, "TCP")]]
    assert egress[1]["to"] == [{"ipBlock": {"cidr": "10.20.0.0/16"}}]
    assert egress[2]["to"] == values["networkPolicy"]["egress"]["kafka"]["to"]
    # without CIDRs or peers a destination is open on its ports only; without ports it has no rule
    open_policy = _one(_manifests(_render({"networkPolicy": {"enabled": True, "egress": {
        "schemaRegistry": {"ports": []}}}})), "NetworkPolicy")["spec"]
    assert [sorted(p["port"] for p in rule["ports"]) for rule in open_policy["egress"]] == [[53, 53], [5432], [9092]]
    assert all("to" not in rule for rule in open_policy["egress"])
    assert "from" not in open_policy["ingress"][0]
    with pytest.raises(_helm().HelmError):
        _render({"networkPolicy": {"enabled": True, "egress": {"postgres": {"cidrs": ["not a cidr"]}}}})


def test_chart_decommission_drops_the_slot_from_a_job_after_scaling_to_zero(tmp_path: Path) -> None:
    assert not [d for d in _manifests(_render(None)) if d["kind"] == "Job"]
    helm = _helm()
    # The slot is active in a streaming pod: dropping it needs every pod gone first.
    with pytest.raises(helm.HelmError, match="replicaCount"):
        _render({"slotDrop": {"enabled": True}})
    values = _load_values(CHART_DIR / "ci" / "decommission-values.yaml")
    documents = _manifests(_render(values))
    deployment = _one(documents, "Deployment")
    assert deployment["spec"]["replicas"] == 0
    job = _one(documents, "Job")
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    container = _container(documents, "Job")
    args = container["args"]
    assert args[:3] == ["slot", "drop", "--yes"] and args[3] == "--timeout"
    grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert float(args[4]) > grace, "the Job waits longer than a terminating pod may hold the slot"
    # the same configuration, Secrets and volumes (CA files) as the pod
    assert container["env"] == _container(documents)["env"]
    assert {v["name"] for v in pod["volumes"]} == {v["name"] for v in deployment["spec"]["template"]["spec"]["volumes"]}
    settings = _pod_settings(documents, tmp_path, "Job")
    assert settings.postgres.dsn.get_secret_value() == "postgresql://secret-pgbridge-postgres-dsn@db/app"
    assert settings.postgres.slot == _pod_settings(documents, tmp_path).postgres.slot
    assert pod["securityContext"]["runAsNonRoot"] is True and container["securityContext"]["readOnlyRootFilesystem"]
    # The Job's pod is not one of the Deployment's: no Service endpoint, no PDB, no NetworkPolicy.
    selector = deployment["spec"]["selector"]["matchLabels"].items()
    assert not selector <= job["spec"]["template"]["metadata"]["labels"].items()
    assert job["spec"]["ttlSecondsAfterFinished"] == 86400


def test_chart_notes_give_a_decommission_procedure_that_works() -> None:
    notes = _render(None)["pgbridge/templates/NOTES.txt"]
    # `kubectl exec deploy/... -- pgbridge slot drop` runs in the pod that holds the slot: it cannot work.
    assert not re.search(r"exec[^\n]*slot drop", notes), notes
    assert "replicaCount=0" in notes and "slotDrop.enabled=true" in notes
    assert "job/pgb-pgbridge-slot-drop" in notes


def test_chart_servicemonitor_is_opt_in_and_targets_the_service() -> None:
    assert not [d for d in _manifests(_render(None)) if d["kind"] == "ServiceMonitor"]
    values = _load_values(CHART_DIR / "ci" / "servicemonitor-values.yaml")
    documents = _manifests(_render(values))
    monitor = _one(documents, "ServiceMonitor")
    service = _one(documents, "Service")
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items(), "the ServiceMonitor does not select the Service"
    port_names = {port["name"] for port in service["spec"]["ports"]}
    for endpoint in monitor["spec"]["endpoints"]:
        assert endpoint["port"] in port_names
        assert endpoint["path"] == "/metrics"
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert service["spec"]["publishNotReadyAddresses"] is True, "an unready pod's metrics matter most"


