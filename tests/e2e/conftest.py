"""Fixtures of the end-to-end tests."""

from __future__ import annotations

import gc
import warnings
from collections.abc import Iterator

import pytest


@pytest.fixture
def redis_py_leaks() -> Iterator[None]:
    """
    Collect what redis-py's cluster and Sentinel clients leave unclosed, its warnings ignored.

    A cluster client drops the connections of a node that left its table (a master killed, a
    startup node the table from ``CLUSTER SLOTS`` replaced) unclosed; a ``Sentinel``'s clients
    of its Sentinels sit in reference cycles, whose sockets are collected before the clients
    that would close them.  Collected here, after each test, rather than raised at the end of
    the session.
    """
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
