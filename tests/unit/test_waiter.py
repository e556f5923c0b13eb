"""How a run loop sleeps (``engine.waiting.Waiter``): a message another process leaves for the
run (``tell``, from a listener's thread) wakes the loop whenever it comes."""

from __future__ import annotations

import asyncio
import threading

from runtime.engine.waiting import Waiter

LONG = 5.0   # a heartbeat: what a wait told of nothing would sleep


async def told_from_a_thread(w: Waiter) -> float:
    """Seconds the next wait took, after ``tell`` from another thread."""
    loop = asyncio.get_running_loop()
    teller = threading.Thread(target=w.tell)
    teller.start()
    teller.join()
    start = loop.time()
    await w.wait([LONG])
    return loop.time() - start


async def test_a_message_left_between_the_first_look_and_the_first_wait_wakes_that_wait() -> None:
    w = Waiter()
    w.looked()   # the run's first step has looked (read the store) and not waited yet
    assert await told_from_a_thread(w) < LONG / 5
    assert w.told
    w.close()


async def test_a_message_left_while_the_loop_waits_wakes_it_and_a_look_forgets_older_wakes() -> None:
    w = Waiter()
    w.looked()
    loop = asyncio.get_running_loop()
    waiting = asyncio.ensure_future(w.wait([LONG]))
    await asyncio.sleep(0.01)
    start = loop.time()
    await asyncio.to_thread(w.tell)
    await waiting
    assert loop.time() - start < LONG / 5
    w.wake()          # woken while not waiting: the next wait returns at once ...
    start = loop.time()
    await w.wait([LONG])
    assert loop.time() - start < LONG / 5
    w.wake()
    w.looked()        # ... unless the loop looked since: then it sleeps its time
    start = loop.time()
    await w.wait([0.2])
    assert loop.time() - start >= 0.15
    w.close()
