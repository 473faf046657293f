"""What the OpenAPI schemas cannot check: policy an admin relies on for a safe install."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.manifests.loader import NAMESPACE, ROOT, load_docs, only

WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
CLUSTER_SCOPED = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "PriorityClass",
    "CustomResourceDefinition",
    *WEBHOOK_KINDS,
}
READ = {"get", "list", "watch"}
USER_ROLES = "user-roles.yaml"  # roles for draquota's users, not draquota's identity
# (apiGroup, resource) -> the verbs draquota may have on it. Anything else is a finding.
ALLOWED = {
    ("resource.k8s.io", "resourceclaims"): READ,
    ("resource.k8s.io", "resourceclaimtemplates"): READ,
    ("resource.k8s.io", "deviceclasses"): READ,
    ("resource.k8s.io", "resourceslices"): READ,
    ("", "pods"): READ | {"update"},  # the queueing controller ungates admitted pods
    ("", "pods/status"): {"update"},  # and shows why the others wait (or were preempted)
    ("", "pods/eviction"): {"create"},  # preemption evicts through the Eviction API
    ("batch", "jobs"): READ | {"update"},  # queued Jobs: admitted whole, then unsuspended
    ("", "events"): {"get", "create", "update"},  # why a queued pod or Job waits
    ("scheduling.k8s.io", "priorityclasses"): READ,  # a queued Job's priority
    ("", "nodes"): READ,
    ("", "namespaces"): READ,
    ("draquota.io", "clusterqueues"): READ,
    ("draquota.io", "localqueues"): READ,
    ("draquota.io", "resourceflavors"): READ,
    # delete: empty shards, each with a resourceVersion precondition
    ("draquota.io", "quotaledgers"): READ | {"create", "update", "patch", "delete"},
    ("draquota.io", "clusterqueues/status"): {"update", "patch"},
    ("draquota.io", "localqueues/status"): {"update", "patch"},
    ("", "secrets"): {"get", "update", "patch"},
    ("coordination.k8s.io", "leases"): {"get", "create", "update"},
    ("authentication.k8s.io", "tokenreviews"): {"create"},  # who scrapes /metrics
    ("authorization.k8s.io", "subjectaccessreviews"): {"create"},  # and whether they may
    ("admissionregistration.k8s.io", "mutatingwebhookconfigurations"): {"get", "update", "patch"},
    ("admissionregistration.k8s.io", "validatingwebhookconfigurations"): {
        "get",
        "update",
        "patch",
    },
}
# Writes on these must be limited to draquota's own objects.
BY_NAME = {
    ("", "secrets"): ["draquota-tls"],
    ("admissionregistration.k8s.io", "mutatingwebhookconfigurations"): ["draquota"],
    ("admissionregistration.k8s.io", "validatingwebhookconfigurations"): ["draquota"],
}
# resourceNames cannot restrict these verbs: a rule granting them by name is a false comfort.
NOT_BY_NAME = {"create", "deletecollection"}
WORKLOAD_RULES = {
    ("", "pods"): {"CREATE"},
    ("batch", "jobs"): {"CREATE", "UPDATE"},
    ("batch", "cronjobs"): {"CREATE", "UPDATE"},
    ("apps", "deployments"): {"CREATE", "UPDATE"},
    ("apps", "replicasets"): {"CREATE", "UPDATE"},
    ("apps", "statefulsets"): {"CREATE", "UPDATE"},
    ("apps", "daemonsets"): {"CREATE", "UPDATE"},
}


def _webhooks() -> list[tuple[str, dict[str, Any]]]:
    return [(kind, hook) for kind in WEBHOOK_KINDS for hook in only(kind, "draquota")["webhooks"]]


def _rules() -> list[tuple[str, dict[str, Any]]]:
    """draquota's own rules; the roles for its users are tests/manifests/test_user_roles.py's."""
    rules = []
    for doc in load_docs():
        if doc.obj["kind"] in ("ClusterRole", "Role") and doc.file != USER_ROLES:
            for rule in doc.obj["rules"]:
                rules.append((f"{doc.obj['kind']}/{doc.obj['metadata']['name']}", rule))
    return rules


def _pod_spec() -> dict[str, Any]:
    return only("Deployment", "draquota")["spec"]["template"]["spec"]


def _container() -> dict[str, Any]:
    containers = _pod_spec()["containers"]
    assert len(containers) == 1
    return containers[0]


# --- webhooks -------------------------------------------------------------------------------


@pytest.mark.parametrize("kind, hook", _webhooks(), ids=lambda v: v if isinstance(v, str) else "")
def test_webhook_answers_v1_within_five_seconds_without_side_effects_on_dry_run(
    kind: str, hook: dict[str, Any]
) -> None:
    assert hook["admissionReviewVersions"] == ["v1"]
    assert hook["sideEffects"] == "NoneOnDryRun"
    assert 1 <= hook["timeoutSeconds"] <= 5
    assert hook["matchPolicy"] == "Equivalent"
    assert hook["failurePolicy"] in ("Fail", "Ignore")
    assert re.fullmatch(r"[a-z0-9-]+(\.[a-z0-9-]+){2,}", hook["name"])


def test_validating_webhook_fails_closed() -> None:
    hooks = only("ValidatingWebhookConfiguration", "draquota")["webhooks"]
    assert [h["failurePolicy"] for h in hooks] == ["Fail"]
    assert [h["name"] for h in hooks] == ["validate.draquota.io"]
    assert only("MutatingWebhookConfiguration", "draquota")["webhooks"][0]["name"] == (
        "mutate.draquota.io"
    )


@pytest.mark.parametrize("kind, hook", _webhooks(), ids=lambda v: v if isinstance(v, str) else "")
def test_webhook_never_intercepts_kube_system_or_its_own_namespace(
    kind: str, hook: dict[str, Any]
) -> None:
    selector = hook["namespaceSelector"]
    assert "matchLabels" not in selector
    excluded = {
        value
        for expr in selector["matchExpressions"]
        if expr["key"] == "kubernetes.io/metadata.name" and expr["operator"] == "NotIn"
        for value in expr["values"]
    }
    assert {"kube-system", NAMESPACE} <= excluded
    assert only("Namespace")["metadata"]["name"] == NAMESPACE


@pytest.mark.parametrize("kind, hook", _webhooks(), ids=lambda v: v if isinstance(v, str) else "")
def test_webhook_calls_the_draquota_service_on_its_path(kind: str, hook: dict[str, Any]) -> None:
    service = only("Service", "draquota")
    ref = hook["clientConfig"]["service"]
    assert (ref["name"], ref["namespace"]) == ("draquota", NAMESPACE)
    assert ref["port"] in [p["port"] for p in service["spec"]["ports"]]
    assert ref["path"] == ("/mutate" if kind.startswith("Mutating") else "/validate")
    # Re-applying the base must never reset the injected caBundle.
    assert "caBundle" not in hook["clientConfig"]
    assert "url" not in hook["clientConfig"]


@pytest.mark.parametrize("kind, hook", _webhooks(), ids=lambda v: v if isinstance(v, str) else "")
def test_webhook_rules_cover_pods_and_pod_template_workloads(
    kind: str, hook: dict[str, Any]
) -> None:
    covered: dict[tuple[str, str], set[str]] = {}
    for rule in hook["rules"]:
        assert rule["scope"] == "Namespaced"
        assert "*" not in rule["resources"] and "*" not in rule["apiGroups"]
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                covered.setdefault((group, resource), set()).update(rule["operations"])
    expected = dict(WORKLOAD_RULES)
    if kind == "ValidatingWebhookConfiguration":
        # the validating webhook also guards the charge annotation and queue label of pods,
        # resizes, and claims re-created under a name an admitted pod references
        expected[("", "pods")] = {"CREATE", "UPDATE"}
        expected[("", "pods/resize")] = {"CREATE", "UPDATE"}
        expected[("resource.k8s.io", "resourceclaims")] = {"CREATE"}
    assert covered == expected


@pytest.mark.parametrize("kind, hook", _webhooks(), ids=lambda v: v if isinstance(v, str) else "")
def test_match_conditions_never_look_at_who_sent_the_request(
    kind: str, hook: dict[str, Any]
) -> None:
    # Pods and claims that controllers create on a user's behalf must be charged too.
    for condition in hook["matchConditions"]:
        assert "userInfo" not in condition["expression"]
        assert "authorizer" not in condition["expression"]


# --- RBAC -----------------------------------------------------------------------------------


@pytest.mark.parametrize("owner, rule", _rules(), ids=lambda v: v if isinstance(v, str) else "")
def test_rbac_rule_is_least_privilege(owner: str, rule: dict[str, Any]) -> None:
    assert "nonResourceURLs" not in rule
    verbs = set(rule["verbs"])
    assert "*" not in verbs
    for group in rule["apiGroups"]:
        assert group != "*"
        for resource in rule["resources"]:
            assert "*" not in resource
            key = (group, resource)
            assert key in ALLOWED, f"{owner}: no access expected to {key}"
            assert verbs <= ALLOWED[key], f"{owner}: {key} {sorted(verbs - ALLOWED[key])}"
            if key in BY_NAME:
                assert rule.get("resourceNames") == BY_NAME[key]
    if rule.get("resourceNames"):
        assert not verbs & NOT_BY_NAME


def test_rbac_grants_what_the_webhook_needs() -> None:
    granted: dict[tuple[str, str], set[str]] = {}
    for _, rule in _rules():
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                granted.setdefault((group, resource), set()).update(rule["verbs"])
    assert granted == ALLOWED


def test_secret_access_is_namespaced_to_draquota() -> None:
    role = only("Role", "draquota")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert [r["resources"] for r in only("ClusterRole", "draquota")["rules"]].count(
        ["secrets"]
    ) == 0


def test_lease_access_is_namespaced_and_renewed_by_name() -> None:
    rules = [r for r in only("Role", "draquota")["rules"] if r["resources"] == ["leases"]]
    assert sorted((r["verbs"], r.get("resourceNames")) for r in rules) == [
        (["create"], None),
        (["get", "update"], ["draquota-queueing"]),
    ]
    assert all("leases" not in r["resources"] for r in only("ClusterRole", "draquota")["rules"])


@pytest.mark.parametrize("kind", ["ClusterRoleBinding", "RoleBinding"])
def test_bindings_grant_only_the_draquota_service_account(kind: str) -> None:
    binding = only(kind, "draquota")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "draquota", "namespace": NAMESPACE}
    ]
    assert binding["roleRef"]["name"] == "draquota"


# --- Deployment -----------------------------------------------------------------------------


def test_deployment_keeps_two_replicas_on_different_nodes_through_disruptions() -> None:
    deployment = only("Deployment", "draquota")
    pdb = only("PodDisruptionBudget", "draquota")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["replicas"] >= 2
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert 1 <= pdb["spec"]["minAvailable"] < deployment["spec"]["replicas"]
    terms = _pod_spec()["affinity"]["podAntiAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert any(
        t["topologyKey"] == "kubernetes.io/hostname"
        and t["labelSelector"]["matchLabels"].items() <= labels.items()
        for t in terms
    )
    service = only("Service", "draquota")
    assert service["spec"]["selector"].items() <= labels.items()


def test_deployment_runs_as_the_draquota_service_account_with_its_priority_class() -> None:
    spec = _pod_spec()
    assert spec["serviceAccountName"] == only("ServiceAccount", "draquota")["metadata"]["name"]
    priority = only("PriorityClass")
    assert spec["priorityClassName"] == priority["metadata"]["name"]
    assert not priority.get("globalDefault", False)
    assert 0 < priority["value"] < 1_000_000_000  # below the system-*-critical classes


def test_container_is_non_root_read_only_and_unprivileged() -> None:
    pod = _pod_spec()["securityContext"]
    container = _container()["securityContext"]
    assert pod["runAsNonRoot"] is True and container["runAsNonRoot"] is True
    assert pod.get("runAsUser", 1) != 0
    assert container["readOnlyRootFilesystem"] is True
    assert container["allowPrivilegeEscalation"] is False
    assert container.get("privileged", False) is False
    assert container["capabilities"]["drop"] == ["ALL"]
    assert "add" not in container["capabilities"]
    assert pod["seccompProfile"]["type"] == "RuntimeDefault"
    assert container["seccompProfile"]["type"] == "RuntimeDefault"
    assert not _pod_spec().get("hostNetwork", False)


def test_container_has_resources_and_https_probes() -> None:
    container = _container()
    assert {"cpu", "memory"} <= container["resources"]["requests"].keys()
    assert "memory" in container["resources"]["limits"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        get = container[probe]["httpGet"]
        assert (get["path"], get["scheme"]) == (path, "HTTPS")
        assert get["port"] in ports
    service_port = only("Service", "draquota")["spec"]["ports"][0]
    assert service_port["targetPort"] in ports


def _arg(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def test_container_serves_in_cluster_with_the_mounted_secret_and_config() -> None:
    container = _container()
    args = container["args"]
    assert args[:2] == ["serve", "--in-cluster"]
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in _pod_spec()["volumes"]}
    cert_mount = mounts[_arg(args, "--cert-dir")]
    assert cert_mount["readOnly"] is True
    assert volumes[cert_mount["name"]]["secret"]["secretName"] == "draquota-tls"
    config_path = Path(_arg(args, "--config"))
    config_mount = mounts[str(config_path.parent)]
    configmap = volumes[config_mount["name"]]["configMap"]["name"]
    assert config_path.name in only("ConfigMap", configmap)["data"]
    assert int(_arg(args, "--port")) in [p["containerPort"] for p in container["ports"]]
    assert "/tmp" in mounts  # writable scratch space with a read-only root filesystem


def test_config_file_is_accepted_by_the_settings_parser() -> None:
    settings_module = pytest.importorskip("quota.settings")
    data = yaml.safe_load(only("ConfigMap", "draquota-config")["data"]["config.yaml"])
    settings = settings_module.Settings.from_mapping(data)
    assert settings.unmapped_device_class == "Deny"
    assert settings.placement == "Enforce"


def test_namespaced_objects_live_in_the_draquota_namespace() -> None:
    for doc in load_docs():
        kind = doc.obj["kind"]
        namespace = doc.obj["metadata"].get("namespace")
        if kind in CLUSTER_SCOPED:
            assert namespace is None, doc.id
        else:
            assert namespace == NAMESPACE, doc.id


# --- image ----------------------------------------------------------------------------------


def _dockerfile() -> list[tuple[str, str]]:
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    text = re.sub(r"\\\n", " ", text)
    lines = [line.strip() for line in text.splitlines()]
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1])
        for line in lines
        if line and not line.startswith("#")
    ]


def test_image_runs_draquota_serve_in_cluster_as_a_numeric_non_root_user() -> None:
    instructions = _dockerfile()
    froms = [v for k, v in instructions if k == "FROM"]
    assert all(f.split()[0] == "python:3.11-slim" for f in froms)
    final = instructions[max(i for i, (k, _) in enumerate(instructions) if k == "FROM") :]
    users = [v for k, v in final if k == "USER"]
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0
    entrypoint = [yaml.safe_load(v) for k, v in final if k == "ENTRYPOINT"][-1]
    cmd = [yaml.safe_load(v) for k, v in final if k == "CMD"][-1]
    assert entrypoint == ["draquota"]
    assert cmd == _container()["args"]
    assert int(uid) == _pod_spec()["securityContext"]["runAsUser"]


def test_dockerignore_keeps_keys_and_the_venv_out_of_the_image() -> None:
    patterns = set(shlex.split((ROOT / ".dockerignore").read_text(), comments=True))
    assert {".venv", ".git", "**/*.key", "tests"} <= patterns
