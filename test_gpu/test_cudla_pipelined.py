"""Frames in flight on one DLA core, through the REAL cuda.bindings.cudla binding against the DLA EMULATOR
(on the GPU, or over the fake driver, whose streams run asynchronously too): while one task is held on its
core (DLA_EMU_TASK_MS), the next frame is preprocessed into the other buffer set and submitted; each frame's
detections are still its own, a staging buffer is not rewritten while a copy out of it waits, and the
backend closes cleanly with tasks still running.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from dla_infer_node.artifact.sidecar import load_artifact
from dla_infer_node.backends.cudla import CudlaBackend
from dla_infer_node.core.detections import Detections
from dla_infer_node.core.pipeline import Detector
from emulator import cases

pytestmark = pytest.mark.emulated


def backend(artifacts_dir: Path, cuda: Any, **kwargs: Any) -> CudlaBackend:
    art = cases.oracle_artifact(artifacts_dir, "hwc4", "int8", "chw16", "fp16")
    return CudlaBackend(load_artifact(art.sidecar), cuda=cuda, **kwargs)


def assert_is(frame: cases.Frame, dets: Detections, what: str) -> None:
    why = cases.match_detections(frame, dets.boxes, dets.class_ids, tol=2.5)
    assert why is None, f"{what}: {why}"


def test_each_frame_in_flight_gets_its_own_detections(emu: Any, cuda: Any, artifacts_dir: Path,
                                                      monkeypatch: Any) -> None:
    frames = [cases.make_frame(seed) for seed in range(10)]
    with backend(artifacts_dir, cuda) as be:
        det = Detector(be, be.metadata, 0.5, 0.45)
        assert det.frames_in_flight == 2
        monkeypatch.setenv("DLA_EMU_TASK_MS", "200")
        a = det.start(frames[0].image, "rgb8")
        b = det.start(frames[1].image, "rgb8")  # submitted while frame 0's task holds the core
        assert not det.ready(a), "start waited for the DLA"
        while not det.ready(b):  # both tasks done and copied out before frame 0's outputs are read
            time.sleep(0.01)
        assert_is(frames[0], det.finish(a), "frame 0, read after frame 1 ran")
        assert_is(frames[1], det.finish(b), "frame 1")
        monkeypatch.setenv("DLA_EMU_TASK_MS", "20")
        run_in_rhythm(det, frames)


def run_in_rhythm(det: Detector, frames: list[cases.Frame]) -> None:
    """The worker's rhythm: frame i submitted, then frame i-1 decoded; each answer is its own frame's."""
    previous = None
    for i, frame in enumerate(frames):
        started = det.start(frame.image, "rgb8")
        if previous is not None:
            assert_is(frames[i - 1], det.finish(previous), f"frame {i - 1}")
        previous = started
    assert previous is not None
    assert_is(frames[-1], det.finish(previous), "last frame")


@pytest.mark.gpu_only
def test_frames_in_flight_with_the_gpu_input_path(emu: Any, cuda: Any, artifacts_dir: Path,
                                                  monkeypatch: Any) -> None:
    """The fused kernel's staging (its own upload event) with the next frame enqueued behind a held task."""
    frames = [cases.make_frame(seed) for seed in range(30, 40)]
    with backend(artifacts_dir, cuda, preprocess_device="gpu") as be:
        monkeypatch.setenv("DLA_EMU_TASK_MS", "20")
        run_in_rhythm(Detector(be, be.metadata, 0.5, 0.45), frames)


def test_input_staging_is_not_rewritten_while_its_copy_waits(emu: Any, cuda: Any, artifacts_dir: Path,
                                                              monkeypatch: Any) -> None:
    """Three buffer sets: frame 1's input copy waits on the stream behind frame 0's task (held 150 ms) when
    frame 2 is preprocessed; the CPU input path waits for that copy before it packs frame 2 into its
    staging buffer, so frame 1's task still sees frame 1."""
    frames = [cases.make_frame(seed) for seed in (21, 22, 23)]
    with backend(artifacts_dir, cuda, frames_in_flight=3) as be:
        det = Detector(be, be.metadata, 0.5, 0.45)
        monkeypatch.setenv("DLA_EMU_TASK_MS", "150")
        started = [det.start(frame.image, "rgb8") for frame in frames]
        for i, (frame, flight) in enumerate(zip(frames, started, strict=True)):
            assert_is(frame, det.finish(flight), f"frame {i}")


def test_close_with_tasks_in_flight(emu: Any, cuda: Any, artifacts_dir: Path, monkeypatch: Any) -> None:
    """close() with two tasks still on the core waits for them, then releases everything (the emulator
    refuses to unregister memory or unload a module under a running task); a second close does nothing."""
    be = backend(artifacts_dir, cuda)
    monkeypatch.setenv("DLA_EMU_TASK_MS", "200")
    be.submit(cases.make_frame(1).image, "rgb8")
    be.submit(cases.make_frame(2).image, "rgb8")
    be.close()
    assert be.close_errors == []
    assert emu.live() == (0, 0, 0)
    be.close()
    assert be.close_errors == []
