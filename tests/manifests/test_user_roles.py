"""The ClusterRoles draquota ships for its users (manifests/base/user-roles.yaml).

What each may do is the contract admins and the namespace's users rely on: the LocalQueue
viewer rides on the built-in view/edit/admin roles, the batch user reads the cluster-scoped
queue objects, the batch admin manages the queue objects and nothing else. None of them
reaches draquota's admission records, its status reports or Secrets.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.manifests.loader import load_docs
from tests.manifests.test_lint import READ, USER_ROLES

GROUP = "draquota.io"
VIEWER, USER, ADMIN = "draquota-localqueue-viewer", "draquota-batch-user", "draquota-batch-admin"
AGGREGATED_TO = ("view", "edit", "admin")
QUEUE_OBJECTS = {"clusterqueues", "localqueues", "resourceflavors"}
# (resource -> verbs) each role grants, in group draquota.io: the whole of it.
GRANTS = {
    VIEWER: {"localqueues": READ, "localqueues/status": {"get"}},
    USER: {"clusterqueues": READ, "clusterqueues/status": {"get"}, "resourceflavors": READ},
    ADMIN: {
        **{resource: READ | {"create", "update", "patch", "delete"} for resource in QUEUE_OBJECTS},
        "clusterqueues/status": {"get"},
        "localqueues/status": {"get"},
    },
}


def _roles() -> dict[str, dict[str, Any]]:
    return {d.obj["metadata"]["name"]: d.obj for d in load_docs([USER_ROLES])}


def _granted(role: dict[str, Any]) -> dict[tuple[str, str], set[str]]:
    granted: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        assert set(rule) <= {"apiGroups", "resources", "verbs"}, rule  # no resourceNames, URLs
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                granted.setdefault((group, resource), set()).update(rule["verbs"])
    return granted


def test_user_roles_file_is_in_the_base_and_holds_exactly_the_three_cluster_roles() -> None:
    roles = _roles()
    assert sorted(roles) == sorted(GRANTS)
    assert {role["kind"] for role in roles.values()} == {"ClusterRole"}


@pytest.mark.parametrize("name", sorted(GRANTS))
def test_user_role_grants_exactly_its_contract(name: str) -> None:
    expected = {(GROUP, resource): verbs for resource, verbs in GRANTS[name].items()}
    assert _granted(_roles()[name]) == expected


@pytest.mark.parametrize("name", [VIEWER, USER])
def test_viewer_and_batch_user_cannot_write_anything(name: str) -> None:
    for key, verbs in _granted(_roles()[name]).items():
        assert verbs <= READ, f"{name}: {key} {sorted(verbs - READ)}"


@pytest.mark.parametrize("name", sorted(GRANTS))
def test_no_user_role_reaches_ledgers_secrets_or_status_writes(name: str) -> None:
    for (group, resource), verbs in _granted(_roles()[name]).items():
        assert group == GROUP, f"{name}: {group}/{resource}"
        assert resource.split("/")[0] in QUEUE_OBJECTS, f"{name}: {resource}"
        assert "quotaledgers" not in resource and "secrets" not in resource
        if resource.endswith("/status"):
            assert verbs == {"get"}, f"{name}: only draquota reports status"
        assert not verbs & {"*", "bind", "escalate", "impersonate", "deletecollection"}


def test_localqueue_viewer_is_aggregated_to_view_edit_and_admin() -> None:
    labels = _roles()[VIEWER]["metadata"]["labels"]
    for role in AGGREGATED_TO:
        assert labels[f"rbac.authorization.k8s.io/aggregate-to-{role}"] == "true"


@pytest.mark.parametrize("name", [USER, ADMIN])
def test_cluster_scoped_roles_are_not_aggregated_to_namespace_roles(name: str) -> None:
    # an admin binds them on purpose; a namespace's edit role must not list every team's quota
    labels = _roles()[name]["metadata"].get("labels") or {}
    assert not [key for key in labels if "aggregate-to" in key]


def test_the_base_binds_no_user_role() -> None:
    bound = {
        d.obj["roleRef"]["name"]
        for d in load_docs()
        if d.obj["kind"] in ("ClusterRoleBinding", "RoleBinding")
    }
    assert not bound & set(GRANTS)
