"""A DLA execution fault (emulated: DLA_EMU_FAULT_TASK_N) surfaces as an 'execution'-stage error naming
the CUDA error and the cudla.get_last_error status; the process then exits non-zero. Runs in a child
process because the emulated fault (a device-side trap) leaves the CUDA context unusable, as a real
DLA fault leaves CUDA in an inconsistent state.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.emulated
HERE = Path(__file__).resolve().parent


# (status as the emulator's environment takes it, its C header value): the message is asserted by VALUE,
# never by the binding's member spelling (13.3.1 'ErrorUmd' vs 13.5.0 'ERROR_UMD')
@pytest.mark.parametrize(("status", "value"), [("0x40000006", 0x40000006), ("0x40000007", 0x40000007)])
def test_execution_fault_is_reported_and_fatal(tmp_path: Path, status: str, value: int, emu: Any) -> None:
    env = dict(os.environ, DLA_EMU_FAULT_TASK_N="3", DLA_EMU_FAULT_STATUS=status,
               DLA_EMULATOR_LIB=str(emu.path))
    proc = subprocess.run([sys.executable, str(HERE / "_fault_child.py"), str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=240)
    out = proc.stdout + proc.stderr
    if os.environ.get("DLA_TEST_OUT"):  # keep the message for the run's record
        with open(Path(os.environ["DLA_TEST_OUT"]) / "fault_messages.txt", "a", encoding="utf-8") as f:
            f.write(out + "\n")
    assert proc.returncode == 3, out
    assert "frame 1 ok" in out and "frame 2 ok" not in out
    assert "STAGE=execution" in out
    assert f"({value})" in out, out  # cudla.get_last_error's numeric status is in the message
    assert "CUDA reported cuda" in out  # the CUDA error name is part of the message
    assert "SECOND=refused" in out
    assert "LIVE=(0, 0, 0)" in out  # DLA-side resources released even after the fault
