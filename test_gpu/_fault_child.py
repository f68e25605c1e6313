"""Child process of test_cudla_fault.py: run frames until the injected DLA execution fault, report, exit.

Exits 3 on the expected ExecutionError (as the node exits non-zero on it), after close(); prints
``STAGE=...``, ``MESSAGE=...`` and ``LIVE=(devices, modules, registrations)`` lines for the parent.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import conftest

from dla_infer_node.artifact.sidecar import load_artifact
from dla_infer_node.backends.cudla import CudlaBackend
from dla_infer_node.backends.cudla_errors import ExecutionError
from emulator import cases


def main() -> int:
    import importlib

    runtime = "emulator.testing.fake_cuda" if conftest.FAKE else "dla_infer_node.backends.cuda_runtime"
    cuda = importlib.import_module(runtime)
    art = cases.oracle_artifact(sys.argv[1], "hwc4", "fp16", "chw16", "fp16")
    be = CudlaBackend(load_artifact(art.sidecar), cuda=cuda)
    frame = cases.make_frame(0).image
    code = 0
    try:
        for i in range(5):
            be.infer(frame, "rgb8")
            print(f"frame {i} ok", flush=True)
        code = 1  # the fault never came
    except ExecutionError as exc:
        print(f"STAGE={exc.stage}")
        print(f"MESSAGE={exc}")
        try:
            be.infer(frame, "rgb8")
            print("SECOND=accepted")
        except ExecutionError:
            print("SECOND=refused")
        code = 3
    finally:
        be.close()
        emu = conftest.Emu()
        print(f"LIVE={emu.live()}", flush=True)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
