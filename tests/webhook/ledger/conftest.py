"""The fake API server and its clients, as tests/webhook/kube has them: QuotaLedger tests
read and write through a real HTTP client."""

from tests.webhook.kube.conftest import api, client, kubeconfig

__all__ = ["api", "client", "kubeconfig"]
