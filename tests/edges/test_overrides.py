"""Per-call policy: httpx's request extension and override_policy(), through every edge."""

from __future__ import annotations

import io
import threading
from typing import Any

import anyio
import httpx
import pytest
import requests
from requests.adapters import HTTPAdapter
from requests.structures import CaseInsensitiveDict

from smoothclient import (
    AsyncSmoothTransport,
    Pacer,
    RetryPolicy,
    SmoothAdapter,
    SmoothTransport,
    override_policy,
    record_of,
)
from smoothclient.testing import FakeClock

URL = "https://api.test/items"


def failing(request: httpx.Request) -> httpx.Response:
    return httpx.Response(503)


def sync_client(clock: FakeClock) -> httpx.Client:
    transport = SmoothTransport(
        httpx.MockTransport(failing),
        policy=RetryPolicy(attempts=4, wait_initial=0.01),
        pacer=Pacer(clock=clock, probe=0),
        sleep=clock.sleep,
        overrides=True,  # its own policy, and the blocks' words over it
    )
    return httpx.Client(transport=transport)


def test_a_request_extension_changes_one_call(clock: FakeClock) -> None:
    with sync_client(clock) as client:
        once = client.get(URL, extensions={"smoothclient": {"attempts": 1}})
        twice = client.get(URL, extensions={"smoothclient": RetryPolicy(attempts=2)})
        default = client.get(URL)
    assert once.extensions["smoothclient"]["attempts"] == 1
    assert twice.extensions["smoothclient"]["attempts"] == 2
    assert default.extensions["smoothclient"]["attempts"] == 4
    with sync_client(clock) as client, pytest.raises(TypeError, match="RetryPolicy or a dict"):
        client.get(URL, extensions={"smoothclient": 3})


def test_override_policy_for_a_block_nested_and_refused_early(clock: FakeClock) -> None:
    with sync_client(clock) as client:
        with override_policy(attempts=2):
            assert client.get(URL).extensions["smoothclient"]["attempts"] == 2
            with override_policy(wait_initial=0.02):  # adds to the outer block
                assert client.get(URL).extensions["smoothclient"]["attempts"] == 2
            with override_policy(attempts=1):
                assert client.get(URL).extensions["smoothclient"]["attempts"] == 1
            # the request's own word beats the block's
            call = client.get(URL, extensions={"smoothclient": {"attempts": 3}})
            assert call.extensions["smoothclient"]["attempts"] == 3
        assert client.get(URL).extensions["smoothclient"]["attempts"] == 4
    with pytest.raises(TypeError, match="RetryPolicy fields"), override_policy(attempt=1):
        pass
    with pytest.raises(ValueError, match="attempts"), override_policy(attempts=0):
        pass


def test_override_policy_stays_in_its_thread(clock: FakeClock) -> None:
    seen: list[int] = []
    with sync_client(clock) as client:

        def other() -> None:
            seen.append(client.get(URL).extensions["smoothclient"]["attempts"])

        with override_policy(attempts=1):
            thread = threading.Thread(target=other)
            thread.start()
            thread.join()
            seen.append(client.get(URL).extensions["smoothclient"]["attempts"])
    assert seen == [4, 1]


def test_override_policy_on_async_tasks_and_requests(clock: FakeClock) -> None:
    async def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503)

    async def main() -> list[int]:
        transport = AsyncSmoothTransport(
            httpx.MockTransport(handler),
            policy=RetryPolicy(attempts=4, wait_initial=0.01),
            pacer=Pacer(clock=clock, probe=0),
            sleep=clock.async_sleep,
            overrides=True,
        )
        found: list[int] = []
        async with httpx.AsyncClient(transport=transport) as client:

            async def one(attempts: int) -> None:
                with override_policy(attempts=attempts):
                    response = await client.get(URL)
                found.append(response.extensions["smoothclient"]["attempts"])

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(one, 1)
                tasks.start_soon(one, 2)
        return sorted(found)

    assert anyio.run(main) == [1, 2]

    with requests.Session() as session:
        session.mount(
            "https://",
            _Adapter(attempts=4, wait_initial=0.01, sleep=clock.sleep, overrides=True),
        )
        with override_policy(attempts=1):
            response = session.get(URL)
        assert response.smoothclient["attempts"] == 1  # type: ignore[attr-defined]
        record = record_of(response)  # one reader for every edge
        assert record is not None
        assert (record.attempts, record.status) == (1, 503)
        assert session.get(URL).smoothclient["attempts"] == 4  # type: ignore[attr-defined]


class _Answers503(HTTPAdapter):
    """What urllib3 would answer: a 503 (no sockets)."""

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:  # type: ignore[override]
        response = requests.Response()
        response.status_code = 503
        response.headers = CaseInsensitiveDict({"Content-Length": "0"})
        response.raw = io.BytesIO(b"")
        response.url = request.url or ""
        response.request = request
        return response


class _Adapter(SmoothAdapter, _Answers503):
    pass


def test_an_edge_with_a_policy_of_its_own_keeps_it_unless_it_opts_in(clock: FakeClock) -> None:
    """An SDK's transport keeps its author's policy; one built on the defaults takes blocks."""

    def built(**kwargs: Any) -> httpx.Client:
        transport = SmoothTransport(
            httpx.MockTransport(failing),
            pacer=Pacer(clock=clock, probe=0),
            sleep=clock.sleep,
            **kwargs,
        )
        return httpx.Client(transport=transport)

    with override_policy(attempts=1):
        with built(policy=RetryPolicy(attempts=3, wait_initial=0.01)) as sdk:
            assert sdk.get(URL).extensions["smoothclient"]["attempts"] == 3
        with built(attempts=2, wait_initial=0.01) as fields:
            assert fields.get(URL).extensions["smoothclient"]["attempts"] == 2
        with built() as app:
            assert app.get(URL).extensions["smoothclient"]["attempts"] == 1
    with pytest.raises(TypeError, match="overrides"):
        SmoothTransport(httpx.MockTransport(failing), overrides="yes")  # type: ignore[arg-type]
