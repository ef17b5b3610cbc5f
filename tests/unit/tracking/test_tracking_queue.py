"""The training flow's MLflow logging thread (flows/tracking_queue.py): in order, nothing lost, errors not hidden."""

from __future__ import annotations

import sys
import threading

import pytest

from solrl.flows.tracking_queue import SWITCH_INTERVAL, TrackingQueue


def test_logging_runs_off_the_calling_thread_in_submission_order():
    done, threads = [], set()

    def log(i):
        threads.add(threading.get_ident())
        done.append(i)

    with TrackingQueue() as queue:
        for i in range(20):
            queue.submit(log, i)
    assert done == list(range(20))  # all of it, once the block ends
    assert threading.get_ident() not in threads and len(threads) == 1  # one worker thread


def test_a_logging_error_is_raised_when_the_block_ends():
    def fail():
        raise RuntimeError("tracking server gone")

    with pytest.raises(RuntimeError, match="tracking server gone"):
        with TrackingQueue() as queue:
            queue.submit(fail)


def test_a_logging_error_is_raised_at_the_next_submit():
    failed = threading.Event()

    def fail():
        failed.set()
        raise RuntimeError("tracking server gone")

    with TrackingQueue() as queue:
        queue.submit(fail)
        failed.wait(10)
        queue._pending[0].exception(timeout=10)  # the failure has been recorded
        with pytest.raises(RuntimeError, match="tracking server gone"):
            queue.submit(print)


def test_a_stopped_block_finishes_the_logging_under_way_and_drops_the_rest():
    started, release, done = threading.Event(), threading.Event(), []

    def slow():
        started.set()
        release.wait(10)
        done.append("slow")

    with pytest.raises(KeyboardInterrupt):
        with TrackingQueue() as queue:
            queue.submit(slow)
            queue.submit(done.append, "dropped")
            started.wait(10)
            threading.Timer(0.2, release.set).start()
            raise KeyboardInterrupt
    assert done == ["slow"]  # what was not started is logged by the next run (its marker file was not written)


def test_the_gil_switch_interval_is_short_while_logging_and_restored_after_even_on_error():
    before = sys.getswitchinterval()
    seen = []
    with TrackingQueue() as queue:
        queue.submit(lambda: seen.append(sys.getswitchinterval()))
    assert seen == [pytest.approx(min(SWITCH_INTERVAL, before))] and seen[0] < 0.005
    assert sys.getswitchinterval() == pytest.approx(before)
    with pytest.raises(KeyboardInterrupt):
        with TrackingQueue():
            raise KeyboardInterrupt
    assert sys.getswitchinterval() == pytest.approx(before)
