"""Where calibration frames come from (a folder of images, a topic of an MCAP bag, or generated scenes),
and the model input tensors made from them.

Each source yields ``(H, W, C) uint8`` frames with their encoding, exactly what the node receives, so
that calibration goes through the package's own preprocess (``core.preprocess.Preprocessor``) and sees
the tensors the DLA will see. Sources are bounded by ``max_images``; ``seed`` decides which images of a
larger folder or bag are taken (a seeded sample, kept in the source's order) and which scenes are drawn.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import numpy as np

from dla_infer_node.bags.bag_frames import image_frames, image_topic
from dla_infer_node.bags.bag_io import BagReader
from dla_infer_node.core.errors import ParameterError
from dla_infer_node.core.image_io import IMAGE_FILE_SUFFIXES, read_image_file
from dla_infer_node.core.model_meta import load_metadata
from dla_infer_node.core.preprocess import Preprocessor
from dla_infer_node.core.synth import generate_scene

# generated calibration scenes use their own seeds, disjoint from training [0, 1e6), evaluation (1e7+)
# and the end-to-end test (2e7+): a calibration never sees an evaluation scene
CALIBRATION_FIRST_SEED = 30_000_000


@dataclass(frozen=True)
class FrameSource:
    """What to calibrate on: one of ``images`` (a folder), ``bag`` + ``topic``, or ``scenes`` (a count)."""

    images: Path | None = None
    bag: Path | None = None
    topic: str | None = None
    scenes: int = 0
    max_images: int = 200
    seed: int = 0

    def describe(self) -> str:
        if self.images is not None:
            return f"images in {self.images}"
        if self.bag is not None:
            return f"topic {self.topic} of bag {self.bag}"
        return f"{self.count()} generated scenes (seeds from {CALIBRATION_FIRST_SEED + self.seed})"

    def count(self) -> int:
        """How many frames the source yields (a folder/bag: at most ``max_images``)."""
        if self.images is not None:
            return min(self.max_images, len(image_files(self.images)))
        if self.bag is not None:
            return min(self.max_images, _topic_count(self.bag, self.topic or ""))
        return min(self.max_images, self.scenes)

    def frames(self) -> Iterator[tuple[np.ndarray, str]]:
        if self.images is not None:
            return _folder_frames(self.images, self.max_images, self.seed)
        if self.bag is not None:
            return _bag_frames(self.bag, self.topic or "", self.max_images, self.seed)
        return _scene_frames(self.count(), self.seed)


def _sample(n: int, k: int, seed: int) -> list[int]:
    """``k`` of ``n`` indices chosen by ``seed``, in increasing order (all when k >= n)."""
    if k >= n:
        return list(range(n))
    return sorted(int(i) for i in np.random.default_rng(seed).choice(n, size=k, replace=False))


def image_files(folder: Path) -> list[Path]:
    if not folder.is_dir():
        raise ParameterError("--images", str(folder), "an existing folder of calibration images")
    files = sorted(p for p in folder.rglob("*") if p.suffix.lower() in IMAGE_FILE_SUFFIXES and p.is_file())
    if not files:
        raise ParameterError("--images", str(folder),
                             f"a folder holding {'/'.join(IMAGE_FILE_SUFFIXES)} files")
    return files


def _folder_frames(folder: Path, max_images: int, seed: int) -> Iterator[tuple[np.ndarray, str]]:
    files = image_files(folder)
    for i in _sample(len(files), max_images, seed):
        yield read_image_file(files[i], stage="calibrate"), "bgr8"


def _topic_count(bag: Path, topic: str) -> int:
    return image_topic(BagReader(bag), topic).message_count


def _bag_frames(bag: Path, topic: str, max_images: int, seed: int) -> Iterator[tuple[np.ndarray, str]]:
    keep = set(_sample(_topic_count(bag, topic), max_images, seed))
    for frame, encoding, _ in image_frames(bag, topic, "calibrate", keep.__contains__):
        yield frame, encoding


def _scene_frames(count: int, seed: int) -> Iterator[tuple[np.ndarray, str]]:
    for i in range(count):
        yield generate_scene(CALIBRATION_FIRST_SEED + seed * 100_000 + i).image, "rgb8"


class Progress:
    """A progress bar on stderr: redrawn in place on a terminal, a line per tenth otherwise (logs)."""

    def __init__(self, total: int, stream: TextIO = sys.stderr, width: int = 30) -> None:
        self.total, self.stream, self.width, self.done = max(total, 1), stream, width, 0
        self.tty = stream.isatty()

    def step(self) -> None:
        self.done += 1
        tenth = self.done * 10 // self.total
        if self.tty or tenth != (self.done - 1) * 10 // self.total or self.done == self.total:
            filled = self.width * self.done // self.total
            bar = "#" * filled + "." * (self.width - filled)
            end = "\r" if self.tty and self.done < self.total else "\n"
            self.stream.write(f"calibrating [{bar}] {self.done}/{self.total}{end}")
            self.stream.flush()


def calibration_tensors(source: FrameSource, meta_path: Path, progress: Progress | None = None
                        ) -> Iterator[dict[str, np.ndarray]]:
    """The model input, one preprocessed frame at a time, as ONNX Runtime's data reader feeds it."""
    meta = load_metadata(meta_path)
    pre = Preprocessor(meta.input)
    for image, encoding in source.frames():
        tensor, _ = pre(image, encoding)
        if progress:
            progress.step()
        yield {meta.input.name: tensor.copy()}  # the preprocessor reuses its buffer
