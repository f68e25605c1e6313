"""Route what libjpeg/libpng print to stderr during a decode, instead of letting it reach the terminal.

OpenCV's image codecs print libjpeg warnings ("Corrupt JPEG data: ...") and libpng errors with C
``fprintf(stderr)``, once per bad frame and unthrottled; OpenCV's own log level does not reach them. The
only handle is the file descriptor: while a decode runs, fd 2 points at an in-memory file, and what was
written is handed to a sink (the node's throttled logger; by default, written back to stderr unchanged).
Decodes are serialised by a lock (the node decodes on its one worker thread anyway). Another thread that
writes to stderr during those milliseconds is captured too; the sink gets its text and should pass
lines it does not recognise back with :func:`write_stderr`.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

Sink = Callable[[str], None]

# OpenCV's own log lines: "[ WARN:0@0.040] global grfmt_png.cpp:... PNG input buffer is incomplete"
_OPENCV_LOG_LINE = re.compile(r"^\[\s*[A-Z]+:\d")


def codec_lines(text: str) -> tuple[list[str], list[str]]:
    """(what the codecs said, other threads' log lines) in captured ``text``, blank lines dropped.

    A line starting with ``[`` is another thread's log line caught while a decode held stderr (ROS's
    ``[WARN] [time] [name]: ...``), except OpenCV's own ``[ WARN:0@t] ...``, which is codec output and
    as unthrottled as libpng's.
    """
    codec: list[str] = []
    other: list[str] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        (other if line.startswith("[") and not _OPENCV_LOG_LINE.match(line) else codec).append(line)
    return codec, other


def write_stderr(text: str) -> None:
    """Write to the process's real stderr (fd 2), bypassing Python's buffering."""
    os.write(2, text.encode("utf-8", "replace"))


class StderrRouter:
    """``with router.capture(): cv2.imdecode(...)``: fd 2 output in the block goes to ``sink``."""

    def __init__(self, sink: Sink = write_stderr) -> None:
        self.sink = sink
        self._lock = threading.Lock()
        self._memfd: int | None = None

    @contextmanager
    def capture(self) -> Iterator[None]:
        text = ""
        try:
            with self._lock:
                if self._memfd is None:
                    self._memfd = os.memfd_create("dla_infer_codec_stderr") if hasattr(os, "memfd_create") \
                        else -1
                if self._memfd < 0:  # no memfd (not Linux): leave stderr alone
                    yield
                    return
                saved = os.dup(2)
                os.dup2(self._memfd, 2)
                try:
                    yield
                finally:
                    os.dup2(saved, 2)
                    os.close(saved)
                    text = self._drain(self._memfd)
        finally:
            if text:  # outside the lock: the sink may log, and logging may write to stderr
                self.sink(text)

    @staticmethod
    def _drain(fd: int) -> str:
        size = os.lseek(fd, 0, os.SEEK_CUR)
        if not size:
            return ""
        text = os.pread(fd, size, 0).decode("utf-8", "replace")
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        return text


# the one router compressed decodes use; the node points its sink at a throttled logger
CODEC_STDERR = StderrRouter()
