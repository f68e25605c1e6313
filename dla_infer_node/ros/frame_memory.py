"""Frame-sized buffers that stay mapped: the allocator setting of the node's process.

Every raw frame arrives as a new ``bytes`` object of the frame's size (6.2 MB for 1920x1080 rgb8), and
rmw's serialized buffer is another. glibc serves a block that large with a fresh ``mmap`` and unmaps it
when it is freed (its threshold only rises to the size of the last block freed, and the next frame is
the same size, so it maps again): every frame then touches ~1500 new pages. On a 2-core x86 VM that was
~4500 minor page faults and 9-10 ms of system time per 1080p frame in a bare rclpy subscriber, and 0.3
after this setting (bench/results/node_camera.json has the node's own figures). With the setting, blocks up
to 32 MiB come from the heap and up to 64 MiB of freed heap stay in the process for the next frames.
"""

from __future__ import annotations

import ctypes
import ctypes.util

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameter numbers (malloc.h)
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # glibc's largest allowed value on 64-bit; above any camera frame we take
TRIM_THRESHOLD = 64 << 20


def keep_frame_buffers() -> bool:
    """Set glibc's thresholds so frame buffers are reused, not mapped and faulted in again per frame.
    False where the C library is not glibc (musl has no mallopt) or refuses the values."""
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
