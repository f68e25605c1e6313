"""Check the DLA EMULATOR's C declarations (emulator/cudla_emu.h) against NVIDIA's own cudla.h.

    python tools/check_cudla_header.py [--header PATH]

Without ``--header`` it downloads the ``nvidia-cudla`` wheel for aarch64 into a temporary folder
(``pip download --no-deps --only-binary=:all: --platform manylinux2014_aarch64 nvidia-cudla==13.4.92``)
and reads ``nvidia/cu13/include/cudla.h`` from it; the header is NVIDIA's (proprietary licence) and is
never copied into the repository. Checked:

* struct/union sizes and field offsets: one C program compiled twice with gcc, once per header;
* enum values: every enumerator of each enum type the emulator declares, by value (same program);
* prototypes: every function NVIDIA declares is declared by the emulator (header or sources) with the same
  parameter types (names ignored; ``const T`` is ``T const``; a parameter's top-level const is dropped, as
  C ignores it in a function's type).

Exit 0: all match; 1: a difference (each printed); 77: skipped (no network/registry, no C compiler), with
the reason on stdout.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EMU_HEADER = ROOT / "emulator" / "cudla_emu.h"
WHEEL = "nvidia-cudla==13.4.92"
SKIP = 77
# struct -> fields whose offsets are compared (the layouts the binding passes to the library)
LAYOUTS = {
    "cudlaModuleTensorDescriptor": ("name", "size", "n", "c", "h", "w", "dataFormat", "dataType",
                                    "dataCategory", "pixelFormat", "pixelMapping", "stride"),
    "cudlaTask": ("moduleHandle", "outputTensor", "numOutputTensors", "numInputTensors", "inputTensor",
                  "waitEvents", "signalEvents"),
    "cudlaModuleAttribute": ("numInputTensors", "inputTensorDesc"),
    "cudlaDevAttribute": ("unifiedAddressingSupported", "deviceVersion"),
    "CudlaFence": ("fence", "type"),
    "cudlaWaitEvents": ("preFences", "numEvents"),
    "cudlaSignalEvents": ("devPtrs", "eofFences", "numEvents"),
}
ENUM_TYPES = ("cudlaStatus", "cudlaMode", "cudlaModuleAttributeType", "cudlaDevAttributeType",
              "cudlaFenceType")


def fetch_header(tmp: Path) -> Path | str:
    """NVIDIA's cudla.h from the wheel, or the reason it cannot be had."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--platform",
           "manylinux2014_aarch64", WHEEL, "-d", str(tmp), "-q"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=25)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"pip download {WHEEL} failed: {exc}"
    wheels = list(tmp.glob("nvidia_cudla-*.whl"))
    if proc.returncode != 0 or not wheels:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return f"pip download {WHEEL} failed (registry unreachable?): {last}"
    with zipfile.ZipFile(wheels[0]) as z:
        name = next((n for n in z.namelist() if n.endswith("include/cudla.h")), None)
        if name is None:
            return f"{wheels[0].name} holds no include/cudla.h"
        out = tmp / "nvidia_cudla.h"
        out.write_bytes(z.read(name))
    return out


def enumerators(text: str, enum_type: str) -> list[str]:
    """Enumerator names of ``enum_type``, whether written ``enum T {..}`` or ``typedef enum {..} T``."""
    m = re.search(r"enum\s+" + enum_type + r"\s*\{(.*?)\}", text, re.S) or \
        re.search(r"typedef\s+enum\s*\{([^{}]*?)\}\s*" + enum_type + r"\s*;", text, re.S)
    if not m:
        return []
    body = re.sub(r"/\*.*?\*/|//[^\n]*", "", m.group(1), flags=re.S)
    return [e.split("=")[0].strip() for e in body.split(",") if e.split("=")[0].strip()]


def probe_program(header: Path, names: dict[str, list[str]]) -> str:
    lines = ["#include <stdio.h>", "#include <stddef.h>", f'#include "{header}"', "int main(void) {"]
    for struct, fields in LAYOUTS.items():
        lines.append(f'  printf("sizeof {struct} %zu\\n", sizeof({struct}));')
        lines += [f'  printf("offsetof {struct}.{f} %zu\\n", offsetof({struct}, {f}));' for f in fields]
    for enum_type, values in names.items():
        lines += [f'  printf("enum {enum_type}.{v} %lld\\n", (long long){v});' for v in values]
    return "\n".join([*lines, "  return 0;", "}"])


def run_probe(cc: str, header: Path, names: dict[str, list[str]], tmp: Path, tag: str) -> dict[str, str]:
    src, exe = tmp / f"probe_{tag}.c", tmp / f"probe_{tag}"
    src.write_text(probe_program(header, names))
    subprocess.run([cc, "-std=c11", "-o", str(exe), str(src)], check=True, capture_output=True, text=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    return dict(line.rsplit(" ", 1) for line in out.splitlines())


def prototypes(text: str) -> dict[str, list[str]]:
    """Function name -> canonical parameter types (names dropped, leading const moved after the type)."""
    text = re.sub(r"/\*.*?\*/|//[^\n]*", "", text, flags=re.S)
    out: dict[str, list[str]] = {}
    for m in re.finditer(r"cudlaStatus\s+(?:CUDLA\w*\s+)?(cudla\w+)\s*\(([^;{)]*)\)\s*[;{]", text):
        params = []
        for p in m.group(2).split(","):
            toks = re.findall(r"\w+|\*", p)
            if not toks or toks == ["void"]:
                continue
            if len(toks) > 1 and re.fullmatch(r"\w+", toks[-1]) and toks[-1] not in ("const",):
                toks = toks[:-1]  # the parameter name
            if toks[0] == "const":
                toks = [toks[1], "const", *toks[2:]]
            if len(toks) > 1 and toks[-1] == "const":
                toks = toks[:-1]  # top-level const of a parameter is not part of the function's type
            params.append(" ".join(toks))
        out[m.group(1)] = params
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--header", help="NVIDIA's cudla.h (default: from the nvidia-cudla wheel)")
    args = ap.parse_args(argv)
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        print("skipped: no C compiler")
        return SKIP
    with tempfile.TemporaryDirectory(prefix="cudla-h-") as t:
        tmp = Path(t)
        got = Path(args.header) if args.header else fetch_header(tmp)
        if isinstance(got, str):
            print(f"skipped: {got}")
            return SKIP
        nv_text, emu_text = got.read_text(errors="replace"), EMU_HEADER.read_text()
        names = {e: enumerators(emu_text, e) for e in ENUM_TYPES}
        problems = [f"enum {e}: {v} missing from the emulator" for e in ENUM_TYPES
                    for v in enumerators(nv_text, e) if v not in names[e]]
        nv = run_probe(cc, got, names, tmp, "nvidia")
        emu = run_probe(cc, EMU_HEADER, names, tmp, "emulator")
        problems += [f"{k}: NVIDIA {nv[k]}, emulator {emu[k]}" for k in nv if nv[k] != emu.get(k)]
        emu_protos = prototypes(emu_text + "".join(p.read_text() for p in (ROOT / "emulator").glob("*.c")))
        for name, params in prototypes(nv_text).items():
            if name not in emu_protos:
                problems.append(f"prototype {name}: not declared by the emulator")
            elif emu_protos[name] != params:
                problems.append(f"prototype {name}: NVIDIA ({', '.join(params)}) vs emulator "
                                f"({', '.join(emu_protos[name])})")
        for p in problems:
            print(p)
        n_enum = sum(len(v) for v in names.values())
        print(f"{len(nv)} layout/enum facts ({n_enum} enumerators), {len(prototypes(nv_text))} prototypes "
              f"checked: {'all match' if not problems else f'{len(problems)} differences'}")
        return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
