"""The keyed store of runs of several machines: what an outsider on the TCP port sees and can change."""

from __future__ import annotations

import datetime
import os
from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch.distributed as dist

from notebook_accel.errors import LaunchError
from notebook_accel.launcher.rendezvous import store as rendezvous
from notebook_accel.launcher.rendezvous.keyed_store import KeyedStore, StoreTampered
from tests.helpers import free_port

pytestmark = pytest.mark.timeout(90)

SECRET = bytes(range(32))
TIMEOUT = datetime.timedelta(seconds=10)


@pytest.fixture
def server() -> Iterator[Any]:
    """A TCP store served in this process (port 0: a free one)."""
    store = dist.TCPStore("127.0.0.1", 0, None, True, TIMEOUT, wait_for_workers=False)
    yield store


def _client(server: Any) -> Any:
    return dist.TCPStore("127.0.0.1", server.port, None, False, TIMEOUT, wait_for_workers=False)


def test_the_keyed_store_behaves_like_a_store() -> None:
    keyed, plain = KeyedStore(dist.HashStore(), SECRET), dist.HashStore()
    for store in (keyed, plain):
        store.set_timeout(datetime.timedelta(seconds=2))
    for store in (keyed, plain):
        store.set("a", "1")
        store.multi_set(["b", "c"], ["2", b"\x00\xff"])
        store.append("d", "x")
        store.append("d", "y")
    for store in (keyed, plain):
        assert store.get("a") == b"1" and store.multi_get(["b", "c"]) == [b"2", b"\x00\xff"]
        assert store.get("d") == b"xy"
        assert store.add("n", 2) == 2 and store.add("n", 3) == 5 and store.add("a", 1) == 2
        assert store.compare_set("e", "", "first") == b"first"  # absent and expected empty: set
        assert store.compare_set("e", "other", "second") == b"first"  # mismatch: the current value
        assert store.compare_set("e", "first", "second") == b"second"
        assert store.compare_set("missing", "x", "y") == b"x"  # absent, expected not empty: as torch's stores
        assert store.check(["a", "e"]) and not store.check(["missing"])
        store.wait(["a"], datetime.timedelta(seconds=1))
        with pytest.raises(dist.DistStoreError):
            store.wait(["never"], datetime.timedelta(milliseconds=100))
        assert store.delete_key("a") and not store.check(["a"])


def test_a_workers_keyed_store_works_through_torchs_prefix_stores(server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """What init_process_group does with the store: wrap it in PrefixStores (C++) and drop the Python object."""
    import gc
    import sys

    torch_rendezvous = sys.modules["torch.distributed.rendezvous"]  # the name is shadowed by a function
    monkeypatch.setitem(torch_rendezvous._rendezvous_handlers, "env", torch_rendezvous._rendezvous_handlers["env"])
    for name, value in {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(server.port), "RANK": "0", "WORLD_SIZE": "1",
                        "TORCHELASTIC_USE_AGENT_STORE": "True"}.items():
        monkeypatch.setenv(name, value)
    rendezvous.use_keyed_store(SECRET)
    store, _, _ = next(torch_rendezvous.rendezvous("env://", timeout=TIMEOUT))
    prefixed = dist.PrefixStore("default_pg/0/", store)
    del store
    gc.collect()
    prefixed.set("a", "1")
    assert prefixed.get("a") == b"1" and prefixed.add("n", 2) == 2 and prefixed.check(["a"])
    assert prefixed.delete_key("a") and not prefixed.check(["a"]) and prefixed.num_keys() >= 1
    assert "default_pg/0/n" not in " ".join(_client(server).list_keys())


def test_an_outsider_sees_no_names_and_no_values(server: Any) -> None:
    run = KeyedStore(_client(server), SECRET)
    run.set("default_pg/0//cpu//0/rank_0_address", "10.0.0.7:41234")
    run.add("default_pg/0//barrier", 1)
    outsider = _client(server)
    names = outsider.list_keys()
    assert len(names) == 2 and all(len(n) == 64 and set(n) <= set("0123456789abcdef") for n in names), names
    values = b"".join(outsider.get(n) for n in names)
    assert b"10.0.0.7" not in values and b"41234" not in values
    assert not outsider.check(["default_pg/0//cpu//0/rank_0_address"])


def test_a_value_written_or_moved_by_an_outsider_is_refused(server: Any) -> None:
    run = KeyedStore(_client(server), SECRET)
    run.set("address", "10.0.0.7:41234")
    run.set("other", "10.0.0.8:1")
    outsider = _client(server)
    name_of = {key: run._name(key) for key in ("address", "other")}  # what a listing shows (not which is which)
    outsider.set(name_of["address"], "10.6.6.6:1")
    with pytest.raises(StoreTampered, match="'address' was not written by this run"):
        run.get("address")
    outsider.set(name_of["address"], outsider.get(name_of["other"]))  # a valid value of another key
    with pytest.raises(StoreTampered):
        run.get("address")
    with pytest.raises(StoreTampered):
        run.add("address", 1)
    stranger = KeyedStore(_client(server), bytes(32))  # another secret: another run, or a guess
    stranger.set("other", "forged")  # lands under another name: the run's key is untouched
    assert run.get("other") == b"10.0.0.8:1"


def _member(rank: int, port: int) -> None:
    """A process of a 2-process gloo group over the keyed store; exit code 0 when the all-reduce summed to 2."""
    store = KeyedStore(dist.TCPStore("127.0.0.1", port, 2, rank == 0, TIMEOUT), SECRET)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=2)
    total = torch.ones(1)
    dist.all_reduce(total)
    dist.barrier()
    dist.destroy_process_group()
    os._exit(0 if total.item() == 2.0 else 1)


def test_gloo_runs_over_the_keyed_store() -> None:
    import subprocess
    import sys
    from pathlib import Path

    port = free_port()
    code = ("import sys; from tests.launcher.rendezvous.test_keyed_store import _member; "
            "_member(int(sys.argv[1]), int(sys.argv[2]))")
    members = [subprocess.Popen([sys.executable, "-c", code, str(rank), str(port)],  # fresh processes: see _member
                                cwd=Path(__file__).resolve().parents[3]) for rank in (0, 1)]
    try:
        assert [member.wait(timeout=60) for member in members] == [0, 0]
    finally:
        for member in members:
            member.kill()
            member.wait()


def test_the_secret_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOTEBOOK_ACCEL_STORE_SECRET", raising=False)
    assert rendezvous.store_secret() is None
    monkeypatch.setenv("NOTEBOOK_ACCEL_STORE_SECRET", "short")
    with pytest.raises(LaunchError, match="has 5 characters; at least 16"):
        rendezvous.store_secret()
    monkeypatch.setenv("NOTEBOOK_ACCEL_STORE_SECRET", "a" * 16)
    secret = rendezvous.store_secret()
    assert secret is not None and len(secret) == 32 and secret == rendezvous.store_secret()


def test_a_secret_without_cryptography_installed_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from notebook_accel.launcher.rendezvous.keyed_store import StoreSecretUnusable

    monkeypatch.setitem(sys.modules, "cryptography.hazmat.primitives.ciphers.aead", None)  # import fails
    monkeypatch.setenv("NOTEBOOK_ACCEL_STORE_SECRET", "s" * 32)
    with pytest.raises(StoreSecretUnusable, match=r"pip install 'notebook-accel\[multinode\]'"):
        rendezvous.store_secret()
    with pytest.raises(StoreSecretUnusable):
        KeyedStore(dist.HashStore(), b"0123456789abcdef")


def test_values_are_sealed_with_aes_gcm_bound_to_their_key() -> None:
    inner = dist.HashStore()
    store = KeyedStore(inner, b"0123456789abcdef")
    store.set("a", b"secret value")
    (name,) = [n for n in [store._name("a")] if inner.check([n])]
    sealed = inner.get(name)
    assert b"secret value" not in sealed and len(sealed) == 12 + len(b"secret value") + 16  # nonce, body, GCM tag
    inner.set(store._name("b"), sealed)  # moved to another key: the associated data differs
    with pytest.raises(StoreTampered):
        store.get("b")
