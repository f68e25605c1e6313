"""TEST-ONLY launcher: run ``dla_doctor`` or the node with backend cudla on a machine WITHOUT a GPU.

    python test/_fake_cudla_env.py BUILD_DIR doctor|node [their arguments...]

It builds (into BUILD_DIR, once) the DLA EMULATOR's libcudla.so.1 and the fake libcuda.so.1
(emulator/testing/), loads both before the binding's first call, and swaps the package's CUDA runtime
helpers for ``emulator.testing.fake_cuda``, as test_gpu/conftest.py does in fake-driver mode. Everything
else - cuda.bindings.cudla, the backend, the doctor, the node - is the real code.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def cuda_home() -> str | None:
    for root in (os.environ.get("CUDA_HOME", ""), os.environ.get("CUDA_PATH", ""), "/usr/local/cuda"):
        if root and Path(root, "include", "cuda.h").is_file():
            return root
    return None


def build(out: Path) -> tuple[Path, Path]:
    emu, fake = out / "libcudla.so.1", out / "fake" / "libcuda.so.1"
    if not emu.is_file():
        subprocess.run(["bash", str(ROOT / "emulator" / "build.sh"), str(out)], check=True,
                       stdout=subprocess.DEVNULL)
    if not fake.is_file():
        fake.parent.mkdir(parents=True, exist_ok=True)
        cc = shutil.which("gcc") or shutil.which("cc") or "cc"
        subprocess.run([cc, "-std=c11", "-D_GNU_SOURCE", "-O1", "-fPIC", "-shared", "-fvisibility=hidden",
                        f"-I{cuda_home()}/include", "-Wl,-soname,libcuda.so.1", "-o", str(fake),
                        str(ROOT / "emulator" / "testing" / "fake_libcuda.c")], check=True)
    return emu, fake


def main(argv: list[str]) -> int:
    emu, fake = build(Path(argv[0]))
    from emulator.testing import fake_cuda

    fake_cuda.bind(str(fake))  # before the emulator dlopens libcuda.so.1
    ctypes.CDLL(str(emu), mode=ctypes.RTLD_GLOBAL)
    import dla_infer_node.backends as backends

    sys.modules["dla_infer_node.backends.cuda_runtime"] = fake_cuda  # type: ignore[assignment]
    backends.cuda_runtime = fake_cuda  # type: ignore[attr-defined]
    if argv[1] == "doctor":
        from dla_infer_node.cli import doctor

        return doctor.main(argv[2:])
    from dla_infer_node.ros import node

    return node.main([sys.argv[0], *argv[2:]])


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
