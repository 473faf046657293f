"""Suite-wide plugins: the e2e tier's session fixtures (one control plane per session)."""

pytest_plugins = ["tests.e2e.fixtures"]
