"""The fake API server fixtures of the live-cluster tests, for the ledger attacks."""

from tests.webhook.kube.conftest import api, client, informers_held, kubeconfig

__all__ = ["api", "client", "informers_held", "kubeconfig"]
