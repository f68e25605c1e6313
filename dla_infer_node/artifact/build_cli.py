"""``dla_build``: take an ONNX detector to a DLA loadable, one subcommand per step.

    dla_build lint MODEL.onnx        per node: runs on the DLA / needs the GPU / forbids standalone
    dla_build trim MODEL.onnx        cut a YOLO graph after its per-level head convolutions (raw heads)
    dla_build calibrate MODEL.onnx   INT8 calibration: TensorRT cache (10.x) and Q/DQ ONNX (11.4.1+)
    dla_build convert MODEL.onnx     an fp16-typed ONNX (TensorRT 11.4.1+ builds what the ONNX says)
    dla_build compile MODEL.onnx     the trtexec command for the robot's TensorRT, run or printed
    dla_build sidecar X.loadable     write the artifact's sidecar of build facts

Each step is a module of this room exposing ``add_arguments(parser)`` and ``run(args) -> int``; it is
imported only when its subcommand runs, so one step's optional dependencies never slow or break another.
Bad input ends with exit status 2 and one line on stderr naming what is wrong.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from collections.abc import Sequence

from dla_infer_node.core.errors import DlaInferError

EXIT_BAD_INPUT = 2

# subcommand -> (module, one-line help); the order is the order of a build
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "lint": ("dla_infer_node.artifact.lint", "check an ONNX graph against the DLA's layer support"),
    "trim": ("dla_infer_node.artifact.trim", "cut a YOLO graph to its raw head outputs + write metadata"),
    "calibrate": ("dla_infer_node.artifact.calibrate", "INT8 calibration: TensorRT cache and Q/DQ ONNX"),
    "convert": ("dla_infer_node.artifact.convert", "an fp16-typed ONNX for TensorRT 11.4.1+"),
    "compile": ("dla_infer_node.artifact.compile", "the trtexec command for a TensorRT version; run it"),
    "sidecar": ("dla_infer_node.artifact.sidecar_writer", "write a loadable's sidecar of build facts"),
}


def available() -> dict[str, tuple[str, str]]:
    """The subcommands whose module exists in this install (steps land one by one)."""
    out = {}
    for name, (module, text) in SUBCOMMANDS.items():
        if importlib.util.find_spec(module) is not None:
            out[name] = (module, text)
    return out


def build_parser(commands: dict[str, tuple[str, str]]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dla_build", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    subs = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module, text) in commands.items():
        mod = importlib.import_module(module)
        sub = subs.add_parser(name, help=text, description=(mod.__doc__ or text).split("\n\n")[0])
        mod.add_arguments(sub)
        sub.set_defaults(_module=mod)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    commands = available()
    # build only the parser of the asked subcommand when it is known: the others' imports are not paid
    chosen = {k: v for k, v in commands.items() if args_list and args_list[0] == k} or commands
    args = build_parser(chosen).parse_args(args_list)
    try:
        return int(args._module.run(args))
    except DlaInferError as exc:
        print(f"dla_build {args.command}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
