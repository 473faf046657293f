"""A fake Kubernetes API server for tests that speaks real HTTP on 127.0.0.1."""

from tests.fakeapi.server import FakeApiServer
from tests.fakeapi.store import RESOURCES, ApiError, Resource, Store

__all__ = ["RESOURCES", "ApiError", "FakeApiServer", "Resource", "Store"]
