"""SIGINT / SIGTERM as a ``threading.Event``, set from a thread rather than from the signal handler.

The obvious ``signal.signal(SIGINT, lambda *_: stop.set())`` can hang a process for good: Python runs the
handler on the main thread between two bytecodes, and ``Event.set`` takes the Event's internal lock. If the
main thread was inside ``stop.wait(...)`` and held that lock at that moment (it does, briefly, on entry and on
wake-up), the handler waits for a lock its own thread holds. A replay paced by ``stop.wait`` hit this about
once in a few hundred interrupts.

Here the handler does nothing in Python: the interpreter's C-level handler writes the signal number to a
socket (``signal.set_wakeup_fd``) and a small watcher thread reads it and sets the Event, so the lock is taken
by a thread that never holds it already.
"""

from __future__ import annotations

import signal
import socket
import threading
from collections.abc import Callable, Iterable
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _ignore(signum: int, frame: Any) -> None:
    # Installed so the default action (KeyboardInterrupt, termination) does not happen; the byte on the wakeup
    # socket is what sets the Event.
    del signum, frame


def stop_on_signals(
    stop: threading.Event, signals: Iterable[signal.Signals] = STOP_SIGNALS
) -> Callable[[], None]:
    """Set ``stop`` when one of ``signals`` arrives. Call from the main thread; returns a function that puts
    the previous handlers and wakeup fd back (idempotent)."""
    wanted = {int(s) for s in signals}
    reader, writer = socket.socketpair()  # blocking, as the watcher wants the reader
    writer.setblocking(False)  # the C handler must never block
    previous_fd = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    previous = {s: signal.signal(s, _ignore) for s in wanted}

    def watch(pair: tuple[socket.socket, socket.socket]) -> None:
        # The thread holds both ends, so a caller that drops restore() (a process that never restores) does
        # not have the writer garbage-collected, and closed, under the C handler.
        while True:
            try:
                data = pair[0].recv(64)
            except OSError:
                return
            if not data:  # the writer was closed by restore()
                return
            if wanted.intersection(data):
                stop.set()

    watcher = threading.Thread(target=watch, args=((reader, writer),), name="stop-signals", daemon=True)
    watcher.start()
    restored = False

    def restore() -> None:
        nonlocal restored
        if restored:
            return
        restored = True
        # handlers and wakeup fd first, so no signal is written to a socket about to close; then the writer,
        # which ends the watcher, then the reader
        for s, handler in previous.items():
            signal.signal(s, handler)
        signal.set_wakeup_fd(previous_fd)
        writer.close()  # the watcher's recv returns b"" and it ends
        watcher.join(timeout=2.0)
        reader.close()

    return restore
