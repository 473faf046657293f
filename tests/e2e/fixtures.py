"""Session fixtures of the e2e tier, loaded as a plugin by tests/conftest.py so that every
directory (tests/e2e, tests/security, ...) shares one control plane per session.

- `draquota_cluster`: a v1.36.2 control plane with draquota installed (3 replicas behind a
  round-robin proxy); skipped, with the reason, where the control plane is not available.
- `cluster`: its ControlPlane (kubectl, fake nodes, etcd).
- `kube`: a `kubernetes` ApiClient as the cluster admin.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from tests.e2e.cluster import ControlPlane, Draquota, missing_reason, running_cluster
from tests.e2e.objects import CREATED, remove_pods

__all__ = [
    "cluster",
    "draquota_cluster",
    "kube",
    "pytest_collection_modifyitems",
    "pytest_terminal_summary",
]

SKIPPED = pytest.StashKey[str]()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without a control plane, the e2e tests are left out and one line says why."""
    reason = missing_reason()
    e2e = [item for item in items if item.get_closest_marker("e2e")]
    if reason is None or not e2e:
        return
    config.hook.pytest_deselected(items=e2e)
    items[:] = [item for item in items if not item.get_closest_marker("e2e")]
    config.stash[SKIPPED] = f"e2e tier skipped ({len(e2e)} tests): {reason}"


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if SKIPPED in config.stash:
        terminalreporter.write_line(config.stash[SKIPPED], yellow=True)


@pytest.fixture(scope="session")
def draquota_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Draquota]:
    reason = missing_reason()
    if reason is not None:
        pytest.skip(f"e2e tier skipped: {reason}")
    with running_cluster(tmp_path_factory.mktemp("e2e")) as installed:
        yield installed
        _no_admission_errors(installed)


def _no_admission_errors(installed: Draquota) -> None:
    """Over the whole tier, the API server evaluated every matchCondition of draquota's webhooks
    without an error, and never rejected a request because calling draquota failed, except
    while a test broke draquota on purpose (`Draquota.disrupted`). A filter that errors on
    a field the API server leaves out rejects ordinary traffic in every namespace."""
    errors = installed.unexcused_admission_errors()
    (installed.workdir / "admission-errors.txt").write_text(
        "".join(f"{k} {v}\n" for k, v in sorted(errors.items())), encoding="utf-8"
    )
    assert not errors, f"the API server counted admission errors for draquota: {errors}"


@pytest.fixture(scope="module", autouse=True)
def _pods_removed_after_each_module(request: pytest.FixtureRequest) -> Iterator[None]:
    """After a module of e2e tests, its scenarios' pods go (see tests.e2e.objects.CREATED)."""
    yield
    if not request.node.get_closest_marker("e2e") or not CREATED:
        return
    installed = request.getfixturevalue("draquota_cluster")
    remove_pods(installed.cluster, CREATED)
    CREATED.clear()


@pytest.fixture(scope="session")
def cluster(draquota_cluster: Draquota) -> ControlPlane:
    return draquota_cluster.cluster


@pytest.fixture(scope="session")
def kube(cluster: ControlPlane) -> Iterator[k8s.ApiClient]:
    api = k8s_config.new_client_from_config(config_file=str(cluster.kubeconfig))
    yield api
    api.close()
