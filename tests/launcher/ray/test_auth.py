"""A cluster with token authentication that refuses this kernel is named as such, with how to pass the token
(issue 43 item 6): Ray itself only says it could not connect, after ~20 s of retries in its C++ log."""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import pytest

from notebook_accel.cluster import RayCluster
from notebook_accel.errors import LaunchError
from notebook_accel.launcher.placement.ray import reserve

grpc = pytest.importorskip("grpc", reason="grpcio comes with Ray: pip install 'notebook-accel[ray]'")


@pytest.fixture(scope="module", autouse=True)
def _ray_token_loader_imported() -> Iterator[None]:
    """Import what the probe imports (Ray's token loader) before any test's leak check looks at the environment:
    importing Ray sets ``RAY_CLIENT_MODE``; it is put back when this module's tests are done."""
    before = dict(os.environ)
    try:
        import ray._private.authentication.grpc_authentication_client_interceptor  # noqa: F401
    except ImportError:
        pass  # the probe then calls without a token
    yield
    for name in set(os.environ) - set(before):
        del os.environ[name]
    os.environ.update(before)


def _head(refuse: bool) -> Iterator[str]:
    """A stand-in for a head's control service: every call is refused as unauthenticated, or answered."""

    def call(request: bytes, context: Any) -> bytes:
        if refuse:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "InvalidAuthToken: Authentication token is missing")
        return b""

    class Handler(grpc.GenericRpcHandler):  # type: ignore[misc]
        def service(self, details: Any) -> Any:
            return grpc.unary_unary_rpc_method_handler(call)

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((Handler(),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop(None)


@pytest.fixture
def refusing_head() -> Iterator[str]:
    yield from _head(refuse=True)


@pytest.fixture
def open_head() -> Iterator[str]:
    yield from _head(refuse=False)


class _RayThatCannotConnect:
    """``ray.init`` failing as Ray 2.60 does whatever the cause."""

    def is_initialized(self) -> bool:
        return False

    def init(self, **kwargs: Any) -> None:
        raise ConnectionError(f"Failed to connect to Ray cluster at {kwargs.get('address')}")


def test_a_refused_token_is_named_with_how_to_pass_it(refusing_head: str) -> None:
    with pytest.raises(LaunchError) as caught:
        reserve.connect(_RayThatCannotConnect(), RayCluster(address=refusing_head))
    text = str(caught.value)
    assert "refused this kernel's authentication token" in text and "RAY_AUTH_TOKEN" in text
    assert "ray get-auth-token" in text and "restart the kernel" in text


@pytest.mark.parametrize("where", ["open", "nothing"])
def test_other_failures_to_connect_are_not_blamed_on_the_token(where: str, open_head: str) -> None:
    address = open_head if where == "open" else "127.0.0.1:9"  # port 9: nothing listens
    with pytest.raises(LaunchError) as caught:
        reserve.connect(_RayThatCannotConnect(), RayCluster(address=address))
    assert "no Ray cluster answers" in str(caught.value) and "token" not in str(caught.value)
