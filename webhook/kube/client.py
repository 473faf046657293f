"""A thin JSON client over the `kubernetes` ApiClient: raw paths in, dicts out.

The generated typed APIs deserialize into model objects and know nothing of our
CRDs or of every resource.k8s.io version; the informers and the ledger only need
GET/LIST/WATCH/POST/PUT on paths, so this wraps `ApiClient.param_serialize` and
`call_api` (auth, TLS and proxies from the kubeconfig still apply) and parses JSON
with orjson.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import orjson
import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config

__all__ = ["ApiError", "KubeClient", "TransportError", "WatchStream"]

Obj = dict[str, Any]
Timeout = float | tuple[float, float]


class ApiError(Exception):
    """The API server answered with an error status (`code`, `reason` from the Status)."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(f"{code} {reason}: {message}" if reason else f"{code}: {message}")
        self.code = code
        self.reason = reason
        self.message = message

    @property
    def gone(self) -> bool:
        return self.code == 410


class TransportError(Exception):
    """The API server could not be reached or the connection broke."""


def _api_error(status: int, data: bytes) -> ApiError:
    try:
        body = orjson.loads(data)
    except orjson.JSONDecodeError:
        body = {}
    if not isinstance(body, Mapping):
        body = {}
    message = str(body.get("message") or data[:200].decode("utf-8", "replace"))
    return ApiError(status, str(body.get("reason") or ""), message)


def _pooled(configuration: k8s.Configuration) -> k8s.Configuration:
    # One long-lived connection per informer watch plus the ledger's requests.
    configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize or 0, 32)
    return configuration


class KubeClient:
    """JSON requests against one API server through a `kubernetes.client.ApiClient`."""

    def __init__(self, api_client: k8s.ApiClient, timeout: Timeout = (2.0, 10.0)) -> None:
        configuration = api_client.configuration
        if (configuration.connection_pool_maxsize or 0) < 32:
            api_client.rest_client = k8s.rest.RESTClientObject(_pooled(configuration))
        self.api_client = api_client
        self.timeout = timeout

    @classmethod
    def from_kubeconfig(cls, path: str, context: str | None = None) -> KubeClient:
        configuration = k8s.Configuration()
        k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=path, context=context, client_configuration=configuration
        )
        return cls(k8s.ApiClient(configuration))

    @classmethod
    def in_cluster(cls) -> KubeClient:
        configuration = k8s.Configuration()
        k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        return cls(k8s.ApiClient(configuration))

    def _open(
        self,
        method: str,
        path: str,
        query: Sequence[tuple[str, Any]] = (),
        body: Mapping[str, Any] | None = None,
        timeout: Timeout | None = None,
    ) -> Any:
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        method, url, headers, _, _ = self.api_client.param_serialize(
            method,
            path,
            query_params=list(query),
            header_params=headers,
            auth_settings=["BearerToken"],
        )
        try:
            if body is None:
                response = self.api_client.call_api(
                    method, url, headers, _request_timeout=timeout or self.timeout
                ).response
            else:  # the client library would walk and encode the body in Python: orjson is C
                response = self._send(method, url, headers, orjson.dumps(dict(body)), timeout)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise TransportError(f"{method} {path}: {exc}") from exc
        except k8s.ApiException as exc:
            raise TransportError(f"{method} {path}: {exc.reason}") from exc
        if not 200 <= response.status <= 299:
            try:
                data = response.data
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                raise TransportError(f"{method} {path}: {exc}") from exc
            raise _api_error(response.status, data)
        return response

    def _send(
        self,
        method: str,
        url: str,
        headers: dict[str, str],
        payload: bytes,
        timeout: Timeout | None,
    ) -> Any:
        limit = timeout or self.timeout
        connect, read = limit if isinstance(limit, tuple) else (limit, limit)
        return self.api_client.rest_client.pool_manager.request(
            method,
            url,
            body=payload,
            headers=headers,
            timeout=urllib3.Timeout(connect=connect, read=read),
            preload_content=False,
        )

    def request(
        self,
        method: str,
        path: str,
        query: Sequence[tuple[str, Any]] = (),
        body: Mapping[str, Any] | None = None,
        timeout: Timeout | None = None,
    ) -> Obj:
        """One request; the decoded JSON body. ApiError on an error status."""
        response = self._open(method, path, query, body, timeout)
        try:
            data = response.data
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise TransportError(f"{method} {path}: {exc}") from exc
        try:
            result = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise TransportError(f"{method} {path}: invalid JSON from the API server") from exc
        if not isinstance(result, dict):
            raise TransportError(f"{method} {path}: expected a JSON object")
        return result

    def watch(
        self, path: str, query: Sequence[tuple[str, Any]], read_timeout: float
    ) -> WatchStream:
        """Open a watch stream (the request is sent now; ApiError/TransportError on failure)."""
        connect = self.timeout[0] if isinstance(self.timeout, tuple) else self.timeout
        query = [*query, ("watch", "true")]
        return WatchStream(path, self._open("GET", path, query, None, (connect, read_timeout)))


class WatchStream:
    """The events of one open watch, one dict per line; `close()` may be called from any thread."""

    def __init__(self, path: str, response: Any) -> None:
        self.path = path
        self._response = response

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._response.shutdown()
        with contextlib.suppress(Exception):
            self._response.close()

    def __iter__(self) -> Iterator[Obj]:
        buffer = b""
        try:
            for chunk in self._response.stream(amt=None, decode_content=False):
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield orjson.loads(line)
        except (urllib3.exceptions.HTTPError, OSError, orjson.JSONDecodeError) as exc:
            raise TransportError(f"watch {self.path}: {exc}") from exc
        except (AttributeError, ValueError) as exc:  # http.client after close() from another thread
            raise TransportError(f"watch {self.path}: stream closed") from exc
        finally:
            self.close()
            self._response.release_conn()
