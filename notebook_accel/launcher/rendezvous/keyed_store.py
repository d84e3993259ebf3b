"""A rendezvous store whose keys and values mean nothing, and whose values cannot be forged, without the run's
secret: for runs of several machines, whose workers must use node 0's TCP store.

torch's ``TCPStore`` has no authentication: anyone who reaches the port can list every key name
(``list_keys()``), read any value and write any key. :class:`KeyedStore` wraps the store so that, with a secret
every node of the run shares (and nobody else has),

- each key is stored under ``HMAC-SHA256(secret, "key" | key)``: a listing shows random hex, nothing usable;
- each value is sealed with AES-256-GCM (``cryptography``'s AEAD: a fresh random nonce per write, the stored
  key name as associated data, the AES key derived from the secret), so it can be read only with the secret,
  and a value written, altered or moved from another key by anyone else is refused with
  :class:`StoreTampered` instead of being used;
- ``add`` and ``compare_set`` are done as compare-and-swap loops on the encrypted values (the store's own
  ``add`` would need a plain number).

What it cannot stop: an outsider who reaches the port can still delete keys or put back a value the run wrote
earlier under the same key, which makes the run fail (a refused value, a wait that times out); it cannot read
the run's values or make it use a value of its own. The names are keyed with the standard library's ``hmac``; the
values are sealed by the ``cryptography`` package (the ``multinode`` extra), not by code of our own.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import os
from collections.abc import Sequence
from typing import Any

from torch.distributed import Store

from notebook_accel.errors import NotebookAccelError

__all__ = ["KeyedStore", "StoreTampered", "SECRET_BYTES"]

SECRET_BYTES = 32
_NONCE = 12  # AES-GCM's standard nonce size
_TAG = 16  # and its tag


class StoreTampered(NotebookAccelError, RuntimeError):
    """A value in the run's rendezvous store was not written by the run (no valid authentication tag)."""


class StoreSecretUnusable(NotebookAccelError, ImportError):
    """A store secret is set but the package that seals the values (``cryptography``) is missing."""


def aead_class() -> Any:
    """``cryptography``'s AES-GCM class.

    Raises:
        StoreSecretUnusable: the ``cryptography`` package is not installed.
    """
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError as e:
        raise StoreSecretUnusable(
            "NOTEBOOK_ACCEL_STORE_SECRET is set, but the values it protects are sealed by the 'cryptography' "
            "package, which is not installed: pip install 'notebook-accel[multinode]' (or cryptography) on every "
            "node, or unset the variable") from e
    return AESGCM


class KeyedStore(Store):
    """``store`` seen through keyed names and authenticated, encrypted values (see the module docstring).

    Args:
        store: the store to wrap (node 0's ``TCPStore``, or anything with torch's ``Store`` methods).
        secret: the run's shared secret, at least 16 bytes.

    Example:
        >>> import torch.distributed as dist
        >>> store = KeyedStore(dist.HashStore(), b"0123456789abcdef")
        >>> store.set("a", "1"); store.get("a")
        b'1'
    """

    def __init__(self, store: Any, secret: bytes) -> None:
        super().__init__()
        if len(secret) < 16:
            raise ValueError(f"the store secret has {len(secret)} bytes; at least 16 are needed")
        self._store = store
        self._secret = bytes(secret)
        self._names: dict[str, str] = {}
        from cryptography.exceptions import InvalidTag  # after aead_class: it says what to install when missing

        aesgcm = aead_class()
        self._aead = aesgcm(self._mac(b"aes-256-gcm"))  # a key of its own, derived from the secret
        self._invalid = InvalidTag

    # ----------------------------------------------------------------- the scheme
    def _mac(self, *parts: bytes) -> bytes:
        return hmac.new(self._secret, b"\0".join(parts), hashlib.sha256).digest()

    def _name(self, key: str) -> str:
        """The stored name of ``key`` (cached: gloo asks for the same keys again and again)."""
        name = self._names.get(key)
        if name is None:
            name = self._names[key] = self._mac(b"key", key.encode()).hex()
        return name

    def _seal(self, name: str, value: bytes) -> bytes:
        nonce = os.urandom(_NONCE)
        return nonce + self._aead.encrypt(nonce, value, name.encode())

    def _open(self, name: str, key: str, sealed: bytes) -> bytes:
        try:
            if len(sealed) < _NONCE + _TAG:
                raise ValueError("too short")
            return bytes(self._aead.decrypt(sealed[:_NONCE], sealed[_NONCE:], name.encode()))
        except (ValueError, self._invalid):
            raise StoreTampered(
                f"the rendezvous store's value for {key!r} was not written by this run (its authentication tag "
                "does not match): another process reached the store's port and wrote it. The run stops rather "
                "than use it; keep the port unreachable from untrusted machines (a firewall, a private network)"
            ) from None

    @staticmethod
    def _bytes(value: str | bytes | Sequence[int]) -> bytes:
        return value.encode() if isinstance(value, str) else bytes(value)

    def _current(self, name: str) -> bytes | None:
        """The sealed value stored under ``name``, ``None`` when there is none."""
        return self._store.get(name) if self._store.check([name]) else None

    # ----------------------------------------------------------------- torch's Store methods
    def set(self, key: str, value: str | bytes) -> None:
        """Store ``value`` under ``key``."""
        name = self._name(key)
        self._store.set(name, self._seal(name, self._bytes(value)))

    def get(self, key: str) -> bytes:
        """The value of ``key`` (waiting for it as the wrapped store does).

        Raises:
            StoreTampered: the stored value was not written with this run's secret.
        """
        name = self._name(key)
        return self._open(name, key, self._store.get(name))

    def multi_get(self, keys: list[str]) -> list[bytes]:
        """The values of ``keys``, in order."""
        return [self.get(key) for key in keys]

    def multi_set(self, keys: list[str], values: list[str | bytes]) -> None:
        """Store each value under its key."""
        for key, value in zip(keys, values):
            self.set(key, value)

    def compare_set(self, key: str, expected: str | bytes, desired: str | bytes) -> bytes:
        """Set ``key`` to ``desired`` if its value is ``expected`` (or it is absent and ``expected`` is empty);
        returns the value the key has afterwards (``expected`` when it is absent and ``expected`` is not
        empty), as torch's stores do."""
        name, want, new = self._name(key), self._bytes(expected), self._bytes(desired)
        while True:
            sealed = self._current(name)
            if sealed is None and want:
                return want
            if sealed is not None and self._open(name, key, sealed) != want:
                return self._open(name, key, sealed)
            proposal = self._seal(name, new)
            result = self._store.compare_set(name, sealed or b"", proposal)
            if result == proposal:
                return new
            # another writer came first: look again

    def add(self, key: str, amount: int) -> int:
        """Add ``amount`` to the number stored under ``key`` (0 when absent); returns the new number."""
        name = self._name(key)
        while True:
            sealed = self._current(name)
            total = (0 if sealed is None else int(self._open(name, key, sealed))) + amount
            proposal = self._seal(name, str(total).encode())
            if self._store.compare_set(name, sealed or b"", proposal) == proposal:
                return total

    def append(self, key: str, value: str | bytes) -> None:
        """Append ``value`` to the value of ``key`` (creating it)."""
        name, extra = self._name(key), self._bytes(value)
        while True:
            sealed = self._current(name)
            proposal = self._seal(name, (b"" if sealed is None else self._open(name, key, sealed)) + extra)
            if self._store.compare_set(name, sealed or b"", proposal) == proposal:
                return

    def check(self, keys: list[str]) -> bool:
        """Whether every key of ``keys`` is set."""
        return bool(self._store.check([self._name(key) for key in keys]))

    def wait(self, keys: list[str], timeout: datetime.timedelta | None = None) -> None:
        """Wait until every key of ``keys`` is set (at most ``timeout``, else the store's timeout)."""
        names = [self._name(key) for key in keys]
        self._store.wait(names, self._store.timeout if timeout is None else timeout)

    def delete_key(self, key: str) -> bool:
        """Delete ``key``; whether it existed."""
        return bool(self._store.delete_key(self._name(key)))

    def num_keys(self) -> int:
        """The number of keys in the wrapped store (everybody's)."""
        return int(self._store.num_keys())

    def set_timeout(self, timeout: datetime.timedelta) -> None:
        """Set the timeout of this store and of the wrapped one."""
        super().set_timeout(timeout)
        self._store.set_timeout(timeout)

    deleteKey = delete_key  # noqa: N815 - the names torch's C++ side calls (through a PrefixStore, say)
    getNumKeys = num_keys  # noqa: N815

    def has_extended_api(self) -> bool:
        """Whether append/multi_get/multi_set are supported (they are)."""
        return True
