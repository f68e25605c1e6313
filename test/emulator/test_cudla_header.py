"""The DLA EMULATOR's declarations against NVIDIA's own cudla.h (downloaded from the nvidia-cudla wheel
at test time, never committed): struct layouts, enum values, prototypes. Skipped, with the reason, where
the registry cannot be reached."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TOOL = REPO / "tools" / "check_cudla_header.py"
pytestmark = pytest.mark.skipif(not (shutil.which("gcc") or shutil.which("cc")), reason="no C compiler")


def check(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True, timeout=60)


def test_emulator_header_matches_nvidia_cudla_h() -> None:
    p = check()
    if p.returncode == 77:
        pytest.skip(p.stdout.strip())
    assert p.returncode == 0, p.stdout + p.stderr
    assert "16 prototypes checked: all match" in p.stdout


def test_the_check_sees_a_difference(tmp_path: Path) -> None:
    """A header whose status value and descriptor layout differ is reported (the check can fail)."""
    text = (REPO / "emulator" / "cudla_emu.h").read_text()
    bad = text.replace("cudlaErrorUmd = 7", "cudlaErrorUmd = 70").replace("uint64_t size;", "uint32_t size;")
    assert bad != text
    header = tmp_path / "cudla.h"
    header.write_text(bad)
    p = check("--header", str(header))
    assert p.returncode == 1, p.stdout + p.stderr
    assert "enum cudlaStatus.cudlaErrorUmd: NVIDIA 70, emulator 7" in p.stdout
    assert "sizeof cudlaModuleTensorDescriptor: NVIDIA 160, emulator 168" in p.stdout
