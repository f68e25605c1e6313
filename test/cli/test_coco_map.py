"""The package's COCO-style mAP (cli.coco_map, no pycocotools needed at run time) agrees with pycocotools'
COCOeval on random sets: overlapping and duplicate detections, empty images, classes without ground truth,
ties in score, more detections than the per-image cap."""

from __future__ import annotations

import numpy as np
import pytest
from _pycocotools_ref import pycocotools_map

from dla_infer_node.cli.coco_map import coco_map

pytest.importorskip("pycocotools")


def random_set(seed: int, images: int, classes: int) -> tuple[list, list]:
    rng = np.random.default_rng(seed)
    gts, dets = [], []
    for _ in range(images):
        n = int(rng.integers(0, 6))
        xy = rng.uniform(0, 200, (n, 2))
        wh = rng.uniform(4, 80, (n, 2))
        boxes = np.hstack([xy, xy + wh])
        cls = rng.integers(0, classes - 1, n)  # the last class never has ground truth
        gts.append((boxes, cls))
        m = int(rng.integers(0, 12))
        src = rng.integers(0, max(n, 1), m)
        jitter = rng.normal(0, 6, (m, 4))
        base = boxes[src] if n else rng.uniform(0, 200, (m, 4))
        d = base + jitter
        d[:, 2:] = np.maximum(d[:, 2:], d[:, :2] + 1)
        scores = np.round(rng.uniform(0, 1, m), 1)  # rounded: ties in score
        dcls = np.where(rng.uniform(size=m) < 0.8, cls[src] if n else 0, rng.integers(0, classes, m))
        dets.append((d, scores, dcls))
    return gts, dets


@pytest.mark.parametrize("seed", range(6))
def test_agrees_with_pycocotools(seed: int) -> None:
    gts, dets = random_set(seed, images=25, classes=4)
    ref50, ref5095, _ = pycocotools_map(gts, dets, ["a", "b", "c", "d"])
    got50, got5095, table = coco_map(gts, dets, 4)
    assert got50 == pytest.approx(ref50, abs=1e-9) and got5095 == pytest.approx(ref5095, abs=1e-9)
    assert np.all(table[3] == -1)  # no ground truth: left out of the mean, as COCOeval does


def _with_crowds(seed: int, gts: list, dets: list) -> list:
    """Crowd regions for a random set: a few per image, some under detections, of any class."""
    rng = np.random.default_rng(seed + 100)
    crowds = []
    for (_, _), (d, _, dcls) in zip(gts, dets, strict=True):
        n = int(rng.integers(0, 3))
        under = d[rng.integers(0, len(d), n)] if len(d) else rng.uniform(0, 200, (n, 4))
        grow = rng.uniform(0, 40, (n, 4)) * [-1, -1, 1, 1]  # a region around (or beside) a detection
        boxes = under + grow
        boxes[:, 2:] = np.maximum(boxes[:, 2:], boxes[:, :2] + 1)
        cls = dcls[:n] if len(dcls) >= n else rng.integers(0, 4, n)
        crowds.append((boxes, np.asarray(cls, int)))
    return crowds


@pytest.mark.parametrize("seed", range(6))
def test_crowd_regions_agree_with_pycocotools(seed: int) -> None:
    # detections on a crowd region are ignored by COCOeval (neither true nor false positive); before, they
    # were left out of the ground truth and counted as false positives here
    gts, dets = random_set(seed, images=25, classes=4)
    crowds = _with_crowds(seed, gts, dets)
    ref50, ref5095, _ = pycocotools_map(gts, dets, ["a", "b", "c", "d"], crowds)
    got50, got5095, _ = coco_map(gts, dets, 4, crowds=crowds)
    assert got50 == pytest.approx(ref50, abs=1e-9) and got5095 == pytest.approx(ref5095, abs=1e-9)
    assert coco_map(gts, dets, 4)[0] != pytest.approx(ref50, abs=1e-9)  # the crowd regions do matter here


def test_perfect_and_empty() -> None:
    boxes = np.array([[0, 0, 10, 10], [20, 20, 40, 30]], float)
    gts = [(boxes, np.array([0, 1]))]
    perfect = coco_map(gts, [(boxes, np.array([0.9, 0.8]), np.array([0, 1]))], 2)
    assert perfect[:2] == pytest.approx((1.0, 1.0))
    assert coco_map(gts, [(np.zeros((0, 4)), np.zeros(0), np.zeros(0, int))], 2)[:2] == (0.0, 0.0)
