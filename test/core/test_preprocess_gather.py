"""The odd-factor shortcut as remap + LUT: the same tensor as the usual path, and used only where it applies.

Real OpenCV; the expected tensor is the float64 contract (``reference_preprocess``: cv2.resize INTER_LINEAR,
then (pixel - mean) / std) and the usual path of the same preprocessor.
"""

from __future__ import annotations

import numpy as np
import pytest

from dla_infer_node.core.model_meta import InputSpec
from dla_infer_node.core.preprocess import Preprocessor, reference_preprocess

ENCODINGS = {"rgb8": 3, "bgr8": 3, "rgba8": 4, "bgra8": 4, "mono8": 1}


def _frame(w: int, h: int, c: int, seed: int = 3) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, c), dtype=np.uint8)


@pytest.mark.parametrize("encoding", list(ENCODINGS))
@pytest.mark.parametrize(("src", "model", "order"), [
    ((1920, 1080), (640, 512), "rgb"),  # the shipped model: pad rows above and below
    ((1920, 1080), (640, 640), "bgr"),
    ((1080, 1920), (512, 640), "rgb"),  # portrait: pad columns left and right
    ((1917, 1077), (639, 639), "rgb"),  # odd source sizes
    ((500, 250), (100, 100), "bgr"),  # 5x
    ((1920, 1080), (640, 360), "rgb"),  # no padding at all
])
def test_fused_gather_matches_the_contract_and_the_usual_path(encoding: str, src: tuple[int, int],
                                                              model: tuple[int, int], order: str) -> None:
    frame = _frame(*src, ENCODINGS[encoding])
    spec = InputSpec("images", *model, channel_order=order, mean=(12.0, 12.0, 12.0), std=(57.0, 57.0, 57.0),
                     pad_value=114)
    fused = Preprocessor(spec, fused_gather=True)
    got, lb = fused(frame, encoding)
    assert fused.uses_gather  # the gather ran, not the usual path
    ref, lb_ref = reference_preprocess(frame, encoding, spec)
    assert lb == lb_ref
    np.testing.assert_allclose(got, ref, atol=1e-6)  # one grey level is 1/57: any wrong pixel would show
    usual, _ = Preprocessor(spec, fused_gather=False)(frame, encoding)
    np.testing.assert_allclose(got, usual, atol=1e-6)


def test_fused_gather_reads_step_padded_rows_in_place() -> None:
    padded = _frame(1920 * 3 + 64, 1080, 1).reshape(1080, -1)  # 64 bytes of padding after every row
    view = padded[:, :1920 * 3].reshape(1080, 1920, 3)
    assert view.strides[0] == 1920 * 3 + 64
    spec = InputSpec("images", 640, 512)
    got, _ = Preprocessor(spec, fused_gather=True)(view, "rgb8")
    ref, _ = reference_preprocess(np.ascontiguousarray(view), "rgb8", spec)
    np.testing.assert_allclose(got, ref, atol=1e-6)


@pytest.mark.parametrize(("src", "spec", "why"), [
    ((1280, 720), InputSpec("images", 640, 640), "2x: bilinear averages, no pick"),
    ((1920, 1080), InputSpec("images", 512, 512), "3.75x"),
    ((1920, 1080), InputSpec("images", 640, 512, mean=(1.0, 2.0, 3.0)), "per-channel normalisation"),
])
def test_fused_gather_is_not_built_where_it_does_not_apply(src: tuple[int, int], spec: InputSpec,
                                                           why: str) -> None:
    frame = _frame(*src, 3)
    pre = Preprocessor(spec, fused_gather=True)
    got, _ = pre(frame, "rgb8")
    assert not pre.gather_applies, why
    ref, _ = reference_preprocess(frame, "rgb8", spec)
    np.testing.assert_allclose(got, ref, atol=1e-6)


def test_the_choice_is_timed_once_per_frame_size() -> None:
    pre = Preprocessor(InputSpec("images", 640, 512))  # fused_gather=None: measured
    frame = _frame(1920, 1080, 3)
    for _ in range(3):
        pre(frame, "rgb8")
    choice = pre._use_gather
    assert isinstance(choice, bool)  # decided on the first frame and kept
    pre(_frame(960, 540, 3), "rgb8")  # another size (2x: no shortcut): nothing to choose
    assert not pre.gather_applies
    pre(frame, "rgb8")
    assert isinstance(pre._use_gather, bool)  # back to 1080p: timed again for this size
