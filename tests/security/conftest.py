"""The fake API server fixtures of the live-cluster tests, for the ledger attacks."""

from tests.webhook.kube.conftest import api, client, kubeconfig

__all__ = ["api", "client", "kubeconfig"]
