"""SIGINT/SIGTERM -> threading.Event without the handler deadlock (dla_infer_node.core.stop_signals).

Each case runs in its own interpreter: signal handlers belong to a process's main thread, and a regression
would hang, which a subprocess timeout turns into a failure."""

from __future__ import annotations

import subprocess
import sys
import textwrap

# The moment that hung a replay in CI: the main thread holds the Event's internal lock (as Event.wait does on
# entry and on wake-up) when SIGINT arrives. ``_cond`` is private to threading.Event; taking it here is the
# only way to hit that instant every time instead of once in a few hundred interrupts.
HOLD_LOCK_THEN_SIGNAL = """
import os, signal, threading, time
stop = threading.Event()
{install}
with stop._cond:
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.3)  # the Python-level handler runs in here, with the lock held
assert stop.wait(5), "stop was not set"
print("stopped")
"""


def _run(code: str, timeout: float = 20) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=timeout
    )


def test_signal_while_the_event_lock_is_held_sets_stop() -> None:
    install = "from dla_infer_node.core.stop_signals import stop_on_signals\nstop_on_signals(stop)"
    done = _run(HOLD_LOCK_THEN_SIGNAL.format(install=install))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "stopped"


def test_the_naive_handler_hangs_in_the_same_moment() -> None:
    # The control: with stop.set() inside the handler the same script never finishes, so the test above
    # exercises the real hazard rather than a moment that is harmless anyway.
    install = "signal.signal(signal.SIGINT, lambda *_: stop.set())"
    try:
        _run(HOLD_LOCK_THEN_SIGNAL.format(install=install), timeout=3)
    except subprocess.TimeoutExpired:
        return
    raise AssertionError("the naive handler finished; the regression test above no longer proves anything")


def test_sigterm_sets_stop_and_restore_puts_everything_back() -> None:
    done = _run("""
        import os, signal, threading
        from dla_infer_node.core.stop_signals import stop_on_signals
        # a shell without job control starts background jobs with SIGINT ignored: start from the default
        signal.signal(signal.SIGINT, signal.default_int_handler)
        before = signal.getsignal(signal.SIGINT)
        stop = threading.Event()
        restore = stop_on_signals(stop)
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.wait(5), "SIGTERM did not set stop"
        restore()
        restore()  # idempotent
        assert signal.getsignal(signal.SIGINT) is before
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
        assert signal.set_wakeup_fd(-1) == -1, "the wakeup fd was left installed"
        assert not any(t.name == "stop-signals" for t in threading.enumerate()), "watcher still running"
        try:
            os.kill(os.getpid(), signal.SIGINT)  # back to Python's default: KeyboardInterrupt
        except KeyboardInterrupt:
            print("restored")
        """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "restored"


def test_other_signals_do_not_set_stop() -> None:
    done = _run("""
        import os, signal, threading
        from dla_infer_node.core.stop_signals import stop_on_signals
        got = []
        signal.signal(signal.SIGUSR1, lambda *_: got.append(1))  # also writes to the wakeup fd
        stop = threading.Event()
        restore = stop_on_signals(stop)
        os.kill(os.getpid(), signal.SIGUSR1)
        assert not stop.wait(0.5), "SIGUSR1 set stop"
        assert got == [1]
        restore()
        print("ignored")
        """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ignored"
