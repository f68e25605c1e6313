"""``dla_build``: take an ONNX detector to a DLA loadable, one subcommand per step.

    dla_build lint MODEL.onnx        per node: runs on the DLA / needs the GPU / forbids standalone
    dla_build trim MODEL.onnx        cut a YOLO graph after its per-level head convolutions (raw heads)
    dla_build calibrate MODEL.onnx   INT8 calibration: TensorRT cache (10.x) and Q/DQ ONNX (11.4.1+)
    dla_build convert MODEL.onnx     an fp16-typed ONNX (TensorRT 11.4.1+ builds what the ONNX says)
    dla_build compile MODEL.onnx     the trtexec command for the robot's TensorRT, run or printed
    dla_build sidecar X.loadable     write the artifact's sidecar of build facts

Each step is a module of this folder exposing ``add_arguments(parser)`` and ``run(args) -> int``; the
table below names them. The steps import their optional heavy libraries (onnx, onnxruntime) inside
functions, so building the parser costs none of them. Bad input ends with exit status 2 and one line on
stderr naming what is wrong.
"""

from __future__ import annotations

import argparse
import inspect
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dla_infer_node.core.errors import DlaInferError
from dla_infer_node.dla_build import calibrate, convert, lint, sidecar_writer, trim
from dla_infer_node.dla_build import compile as compile_step

EXIT_BAD_INPUT = 2


@dataclass(frozen=True)
class Subcommand:
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    help: str

    @property
    def description(self) -> str:
        """The first paragraph of the step module's docstring."""
        module = inspect.getmodule(self.run)
        return ((module.__doc__ if module else None) or self.help).split("\n\n")[0]


# subcommand -> its step; the order is the order of a build
SUBCOMMANDS: dict[str, Subcommand] = {
    "lint": Subcommand(lint.add_arguments, lint.run, "check an ONNX graph against the DLA's layer support"),
    "trim": Subcommand(trim.add_arguments, trim.run, "cut a YOLO graph to raw heads + metadata"),
    "calibrate": Subcommand(calibrate.add_arguments, calibrate.run, "INT8: TensorRT cache + Q/DQ ONNX"),
    "convert": Subcommand(convert.add_arguments, convert.run, "an fp16-typed ONNX for TensorRT 11.4.1+"),
    "compile": Subcommand(compile_step.add_arguments, compile_step.run, "the trtexec command of a TensorRT"),
    "sidecar": Subcommand(sidecar_writer.add_arguments, sidecar_writer.run, "a loadable's sidecar of facts"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dla_build", description=(__doc__ or "").split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    subs = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, step in SUBCOMMANDS.items():
        sub = subs.add_parser(name, help=step.help, description=step.description)
        step.add_arguments(sub)
        sub.set_defaults(_run=step.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        return int(args._run(args))
    except DlaInferError as exc:
        print(f"dla_build {args.command}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
