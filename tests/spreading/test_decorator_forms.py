"""Bare decorators (``@retry`` without parentheses) and what ``@retry`` retries by default."""

from __future__ import annotations

import asyncio
import errno
import socket
import subprocess
import sys
import types
from collections.abc import Iterator

import httpx
import pytest
import requests

from smoothclient import jittered, paced, retry, retry_context, testing
from smoothclient.spreading.retry import is_transient, transient_errors
from smoothclient.testing import FakeClock


@pytest.fixture
def no_waits() -> Iterator[None]:
    """Testing mode: a bare @retry (real sleeps, default policy) waits nothing, 3 attempts."""
    with testing.testing_mode(attempts=3):
        yield


def test_bare_retry_runs_the_function_and_returns_its_value(no_waits: None) -> None:
    """@retry without parentheses used to return a wrapper and never run the function."""
    calls = 0

    @retry
    def fetch(x: int) -> int:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise ConnectionError("flaky")
        return x * 2

    assert fetch(21) == 42
    assert calls == 3
    assert fetch.__name__ == "fetch"


def test_bare_retry_on_async_functions_and_methods(no_waits: None) -> None:
    """Bare @retry wraps coroutine functions and methods as @retry() does."""

    class Client:
        def __init__(self) -> None:
            self.calls = 0

        @retry
        async def get(self, x: int) -> int:
            self.calls += 1
            if self.calls < 2:
                raise TimeoutError
            return x + 1

        @retry
        def name(self) -> str:
            return "client"

    client = Client()
    assert asyncio.run(client.get(1)) == 2
    assert client.calls == 2
    assert client.name() == "client"


def test_bare_retry_still_refuses_generators() -> None:
    """A bare @retry on a generator is refused when decorating, as @retry() is."""

    def gen() -> Iterator[int]:
        yield 1

    with pytest.raises(TypeError, match="generator"):
        retry(gen)


def test_retry_positional_exception_types_still_work(clock: FakeClock) -> None:
    """@retry(OSError) (types, positionally) is not mistaken for a bare decorator."""
    calls = 0

    @retry(OSError, sleep=clock.sleep, clock=clock)
    def job() -> str:
        nonlocal calls
        calls += 1
        if calls < 2:
            raise OSError("once")
        return "ok"

    assert job() == "ok"
    assert calls == 2

    @retry((KeyError, ValueError), sleep=clock.sleep, clock=clock)
    def other() -> str:
        nonlocal calls
        calls += 1
        if calls < 4:
            raise KeyError("once")
        return "ok"

    assert other() == "ok"


def test_retry_bad_positional_arguments_say_what_is_allowed() -> None:
    """A positional that is neither types nor a function, or on given twice: TypeError."""
    with pytest.raises(TypeError, match="exception type, a tuple of them, or the function"):
        retry(5)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="give on once"):
        retry(ValueError, on=KeyError)


def test_bare_jittered_and_paced_raise_when_decorating() -> None:
    """Their bounds and rate have no default: bare use raises TypeError saying how to write it."""

    async def job() -> None:
        return None

    with pytest.raises(TypeError, match=r"write @jittered\(max_wait\)"):
        jittered(job)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"write @paced\(rate\)"):
        paced(job)  # type: ignore[arg-type]


def counting(exc: BaseException, clock: FakeClock) -> int:
    """How many attempts a @retry() with the default ``on`` makes on a function raising exc."""
    calls = 0

    @retry(attempts=3, sleep=clock.sleep, clock=clock)
    def job() -> None:
        nonlocal calls
        calls += 1
        raise exc

    with pytest.raises(type(exc)):
        job()
    return calls


@pytest.mark.parametrize(
    "exc",
    [
        ValueError("bug"),
        KeyError("bug"),
        TypeError("bug"),
        RuntimeError("bug"),
        FileNotFoundError(errno.ENOENT, "no such file"),
        PermissionError(errno.EACCES, "denied"),
        socket.gaierror(socket.EAI_NONAME, "no such host"),
        httpx.HTTPStatusError(
            "404",
            request=httpx.Request("GET", "http://x.test/"),
            response=httpx.Response(404),
        ),
        requests.HTTPError("404"),
    ],
)
def test_the_default_does_not_retry_bugs(exc: Exception, clock: FakeClock) -> None:
    """A plain bug (ValueError...) or a final answer ends the call at once: one attempt."""
    assert counting(exc, clock) == 1
    assert not is_transient(exc)


@pytest.mark.parametrize(
    "exc",
    [
        ConnectionError("down"),
        ConnectionResetError(errno.ECONNRESET, "reset"),
        ConnectionRefusedError(errno.ECONNREFUSED, "refused"),
        TimeoutError("slow"),
        OSError(errno.ENETUNREACH, "network unreachable"),
        OSError(errno.EHOSTUNREACH, "no route to host"),
        socket.gaierror(socket.EAI_AGAIN, "temporary failure in name resolution"),
        httpx.ConnectError("refused"),
        httpx.ReadTimeout("slow"),
        requests.ConnectionError("refused"),
        requests.Timeout("slow"),
    ],
)
def test_the_default_retries_transient_network_errors(exc: Exception, clock: FakeClock) -> None:
    """Builtin and client libraries' network failures are retried by @retry()."""
    assert counting(exc, clock) == 3
    assert is_transient(exc)


def test_a_client_library_counts_only_once_imported(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """aiohttp's ClientConnectionError is retried when (and only when) aiohttp is loaded."""

    class ClientConnectionError(Exception):
        pass

    monkeypatch.delitem(sys.modules, "aiohttp", raising=False)
    assert ClientConnectionError not in transient_errors()
    assert counting(ClientConnectionError("refused"), clock) == 1
    fake = types.ModuleType("aiohttp")
    fake.ClientConnectionError = ClientConnectionError  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "aiohttp", fake)
    assert ClientConnectionError in transient_errors()
    assert counting(ClientConnectionError("refused"), clock) == 3
    assert httpx.TransportError in transient_errors()
    assert requests.ConnectionError in transient_errors()


def test_retry_context_has_the_same_default(clock: FakeClock) -> None:
    """retry_context() retries network errors, never a bug."""
    runs: list[str] = []

    def block(exc: Exception) -> None:
        for attempt in retry_context(attempts=3, sleep=clock.sleep, clock=clock):
            with attempt:
                runs.append(type(exc).__name__)
                raise exc

    with pytest.raises(ValueError, match="bug"):
        block(ValueError("bug"))
    with pytest.raises(ConnectionError):
        block(ConnectionError("down"))
    assert runs == ["ValueError"] + ["ConnectionError"] * 3


def test_the_default_imports_no_client_library() -> None:
    """Using @retry's default imports neither httpx, requests nor aiohttp."""
    code = (
        "import sys, smoothclient\n"
        "from smoothclient.spreading.retry import is_transient\n"
        "@smoothclient.retry\n"
        "def job():\n"
        "    return 1\n"
        "assert job() == 1 and is_transient(ConnectionError())\n"
        "print(sorted(m for m in ('httpx', 'requests', 'aiohttp') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
