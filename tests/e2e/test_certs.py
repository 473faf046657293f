"""Certificate rotation while the API server calls the webhook: no admission fails.

The admin rotates with the documented commands: `draquota certs rotate --dir DIR` (a new
serving certificate from the same CA), then `draquota certs rotate --dir DIR --ca
--kubeconfig FILE` (a new CA, published with the old one before any replica presents a
certificate it signed). The replicas reload the files without a restart."""

from __future__ import annotations

import ssl
import threading
import time

import pytest
from cryptography import x509
from kubernetes import client as k8s

from tests.e2e.cluster import Draquota, eventually, run_draquota
from tests.e2e.objects import UNSCHEDULED, remove_pods_later

pytestmark = pytest.mark.e2e

NAMESPACE = "e2e-certs"


def _served(port: int) -> x509.Certificate:
    pem = ssl.get_server_certificate(("127.0.0.1", port))
    return x509.load_pem_x509_certificate(pem.encode())


def _on_disk(installed: Draquota) -> x509.Certificate:
    return x509.load_pem_x509_certificate((installed.certs / "tls.crt").read_bytes())


def _all_serve(installed: Draquota, cert: x509.Certificate) -> bool:
    return all(_served(r.port).serial_number == cert.serial_number for r in installed.replicas)


class Load:
    """Pods created back to back through the webhooks by a few users, until stopped."""

    def __init__(self, api: k8s.CoreV1Api, users: int = 3) -> None:
        self.api = api
        self.created = 0
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(u,)) for u in range(users)]

    def _run(self, user: int) -> None:
        index = 0
        while not self._stop.is_set():
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"u{user}-{index}"},
                "spec": {
                    "schedulerName": UNSCHEDULED,
                    "containers": [{"name": "main", "image": "registry.example.com/x:1"}],
                },
            }
            try:
                self.api.create_namespaced_pod(NAMESPACE, pod)
                self.created += 1
            except k8s.ApiException as exc:
                self.failures.append(f"{exc.status}: {exc.body}")
            index += 1

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)


def test_certificate_and_ca_rotation_under_load_fail_no_admission(
    draquota_cluster: Draquota, kube: k8s.ApiClient
) -> None:
    installed = draquota_cluster
    installed.cluster.kubectl("create", "namespace", NAMESPACE)
    remove_pods_later(NAMESPACE)
    tls = str(installed.certs)
    first = _on_disk(installed)
    with Load(k8s.CoreV1Api(kube)) as load:
        time.sleep(2)
        run_draquota("certs", "rotate", "--dir", tls)
        renewed = _on_disk(installed)
        assert renewed.serial_number != first.serial_number
        eventually(lambda: _all_serve(installed, renewed), timeout=30)
        time.sleep(2)
        admin = str(installed.cluster.kubeconfig)
        run_draquota("certs", "rotate", "--dir", tls, "--ca", "--kubeconfig", admin)
        rotated = _on_disk(installed)
        assert rotated.issuer != renewed.issuer
        eventually(lambda: _all_serve(installed, rotated), timeout=30)
        time.sleep(3)
    assert load.failures == []
    assert load.created > 20
