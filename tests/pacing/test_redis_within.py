"""The bound of an async Redis round trip (``redis.link._within``): no server needed."""

from __future__ import annotations

import asyncio

import pytest

from smoothclient.pacing.redis.link import _within


async def _converts_a_cancel() -> None:
    """What a client library may do: a cancel mid-read turned into its own error."""
    try:
        await asyncio.sleep(10)
    except asyncio.CancelledError:
        raise ConnectionError("connection lost") from None


def test_an_answer_in_time_is_returned() -> None:
    async def main() -> int:
        async def quick() -> int:
            await asyncio.sleep(0)
            return 7

        return await _within(quick(), 1.0)

    assert asyncio.run(main()) == 7


def test_an_expiry_is_a_timeout_and_leaves_no_cancel_behind() -> None:
    async def main() -> int:
        with pytest.raises(TimeoutError):
            await _within(asyncio.sleep(10), 0.01)
        task = asyncio.current_task()
        assert task is not None
        return task.cancelling()

    assert asyncio.run(main()) == 0


def test_a_cancel_turned_into_another_error_is_taken_back() -> None:
    """Left counted, the next expiry came out as CancelledError and ended the whole call."""

    async def main() -> int:
        with pytest.raises(ConnectionError):
            await _within(_converts_a_cancel(), 0.01)
        with pytest.raises(TimeoutError):  # not CancelledError
            await _within(asyncio.sleep(10), 0.01)
        task = asyncio.current_task()
        assert task is not None
        return task.cancelling()

    assert asyncio.run(main()) == 0


def test_a_cancel_from_outside_still_cancels() -> None:
    async def main() -> None:
        async def waits() -> None:
            await _within(asyncio.sleep(10), 5.0)

        task = asyncio.ensure_future(waits())
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
