"""The loadable file itself: a regular, readable, non-empty file below a size cap, with its sha256 checked.

It knows paths and digests only; :func:`sidecar.read_loadable` hands it what the sidecar says.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from dla_infer_node.core.errors import ModelError

MAX_LOADABLE_BYTES = 512 * 1024 * 1024  # a YOLO-sized loadable is tens of MiB; more means a wrong file


def check_loadable_file(path: str | Path, max_bytes: int = MAX_LOADABLE_BYTES) -> Path:
    """Exists, is a regular file (not a directory, FIFO or device), non-empty, below the size cap."""
    p = Path(path)
    params = {"path": str(p)}
    try:
        st = os.stat(p)
    except OSError as exc:
        raise ModelError(f"loadable not found or not accessible: {exc.strerror}", call="check_loadable_file",
                         params=params) from exc
    if not stat.S_ISREG(st.st_mode):
        raise ModelError("loadable is not a regular file", call="check_loadable_file", params=params)
    if st.st_size == 0:
        raise ModelError("loadable is empty", call="check_loadable_file", params=params)
    if st.st_size > max_bytes:
        raise ModelError(f"loadable is {st.st_size} bytes, above the {max_bytes}-byte cap",
                         call="check_loadable_file", params=params,
                         hint="is this the right file? raise the cap only for a genuinely large network")
    if not os.access(p, os.R_OK):
        raise ModelError("loadable is not readable", call="check_loadable_file", params=params)
    return p


def read_checked(path: str | Path, sha256: str | None, sidecar: str | Path,
                 max_bytes: int = MAX_LOADABLE_BYTES) -> bytes:
    """The loadable's bytes, after the file checks and (when ``sha256`` is given) the digest check against
    the one the ``sidecar`` records."""
    p = check_loadable_file(path, max_bytes)
    data = p.read_bytes()
    if len(data) > max_bytes:  # the file grew between stat and read
        raise ModelError("loadable changed while reading", call="read_loadable", params={"path": str(p)})
    if sha256:
        digest = hashlib.sha256(data).hexdigest()
        if digest != sha256.lower():
            raise ModelError(f"sha256 {digest} != {sha256} in the sidecar",
                             call="read_loadable", params={"path": str(p), "sidecar": str(sidecar)},
                             hint="the loadable was rebuilt or replaced: rebuild the sidecar with it")
    return data
