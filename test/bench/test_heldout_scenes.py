"""The held-out scene generator (bench.heldout_scenes): deterministic, boxes tight and inside
the frame, each condition holds what it names; and models/README.md's robustness table is the JSON's."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dla_infer_node.bench.heldout_scenes import (
    CONDITIONS,
    HELDOUT_FIRST_SEED,
    draw_object,
    heldout_scene,
    outline_width,
)
from dla_infer_node.bench.robustness import table
from dla_infer_node.core.synth import CLASS_NAMES

REPO = Path(__file__).resolve().parents[2]
SEEDS = range(50_000_000, 50_000_040)


def test_deterministic_and_inside_the_frame() -> None:
    a, b = heldout_scene(50_000_001, "all"), heldout_scene(50_000_001, "all")
    assert np.array_equal(a.image, b.image) and np.array_equal(a.boxes, b.boxes)
    for seed in SEEDS:
        s = heldout_scene(seed, "all")
        assert s.image.shape == (480, 640, 3) and s.image.dtype == np.uint8
        assert len(s.boxes) == len(s.class_ids) >= 1
        assert np.all(s.boxes[:, :2] >= 0) and np.all(s.boxes[:, 2] <= 640) and np.all(s.boxes[:, 3] <= 480)
        assert np.all(s.boxes[:, 2:] > s.boxes[:, :2])


@pytest.mark.parametrize(("condition", "lo", "hi"),
                         [("small", 8, 42), ("medium", 25, 125), ("large", 80, 480)])
def test_size_conditions_hold_their_sizes(condition: str, lo: float, hi: float) -> None:
    boxes = [heldout_scene(s, condition).boxes for s in SEEDS]
    sides = np.concatenate([np.max(b[:, 2:] - b[:, :2], axis=1) for b in boxes])
    assert lo <= sides.min() and sides.max() <= hi, (sides.min(), sides.max())


def test_outlined_objects_cover_less_of_their_box_than_filled_ones() -> None:
    def coverage(condition: str) -> float:
        fractions = []
        for seed in SEEDS:
            s = heldout_scene(seed, condition)
            bg = np.median(s.image.reshape(-1, 3), axis=0)
            for x1, y1, x2, y2 in s.boxes.astype(int):
                if min(x2 - x1, y2 - y1) < 48:  # a 6 px line fills most of a small box either way
                    continue
                patch = s.image[y1:y2, x1:x2].astype(int)
                fractions.append(float(np.mean(np.abs(patch - bg).sum(axis=2) > 60)))
        return float(np.median(fractions))
    assert coverage("outlined") < 0.6 * coverage("filled")  # textured backgrounds blur the measure


def _band_ratio(name: str, side: float, outlined: bool, width: int) -> float:
    """Inner / outer radius of what is drawn of a round shape (alone, on black): 0 for a disc."""
    img = np.zeros((80, 80, 3), np.uint8)
    draw_object(img, name, 40.0, 40.0, side / 2, 0.0, outlined, width, (255, 255, 255))
    yy, xx = np.nonzero(img[..., 0] > 127)
    r = np.hypot(xx - 40.0, yy - 40.0)
    return float(r.min() / r.max())


@pytest.mark.parametrize("side", [12, 16, 20, 26, 32])
def test_an_outlined_circle_is_not_a_ring(side: int) -> None:
    """A 6 px outline around a 12-32 px circle would draw, pixel for pixel, the ring class (a filled band):
    the held-out set caps outlines at a tenth of the side, so every outlined circle keeps a thin band."""
    ring = _band_ratio("ring", side, False, 0)
    for drawn in range(2, 7):
        circle = _band_ratio("circle", side, True, outline_width(drawn, side))
        assert circle > ring + 0.1, (side, drawn, circle, ring)


@pytest.mark.parametrize("name", CLASS_NAMES)
@pytest.mark.parametrize("outlined", [False, True])
def test_the_box_is_the_tight_box_of_what_is_drawn(name: str, outlined: bool) -> None:
    """Alone on black: no ink more than 1 px outside the box, nearly full pixels (> 3/4) at most half a
    pixel outside it (pixel centres at i + 0.5, as the package's boxes have them), and ink within 1 px of
    every edge (the box is not loose). The earlier generator boxed circles around the float centre while
    OpenCV drew them around the truncated one: up to 1.5 px off, and full pixels outside the box."""
    rng = np.random.default_rng(7)
    yy, xx = np.mgrid[:240, :240] + 0.5
    for _ in range(12):
        side = float(rng.uniform(12, 160))
        width = outline_width(int(rng.integers(2, 7)), side) if outlined else 0
        img = np.zeros((240, 240, 3), np.uint8)
        cx, cy = rng.uniform(110, 130, 2)
        box = draw_object(img, name, cx, cy, side / 2, float(rng.uniform(0, np.pi)), outlined, width,
                          (255, 255, 255))
        ink = img[..., 0]
        beyond = np.stack([box[0] - xx, xx - box[2], box[1] - yy, yy - box[3]])  # > 0: outside that edge
        outside = np.maximum(beyond.max(axis=0), 0)
        assert ink[outside > 1.0].max(initial=0) < 64, (name, side, box)
        assert outside[ink > 191].max(initial=0) <= 0.5, (name, side, box)
        assert all(np.any((ink >= 64) & (b > -1.0)) for b in beyond), (name, side, box)


def test_models_readme_robustness_table_is_the_benchmark_json() -> None:
    """The README's table is the shipped model's result file, every held-out set in it."""
    doc = json.loads((REPO / "bench" / "results" / "robustness.json").read_text())
    assert set(doc["results"]) == set(CONDITIONS)
    assert table(doc) in (REPO / "models" / "README.md").read_text()
    side_by_side = table(doc, doc)  # --before: another model's figures on the same scenes, beside these
    assert "| mAP50 before | mAP50 after |" in side_by_side
    assert side_by_side.count("\n") == table(doc).count("\n")


def test_before_figures_of_other_scenes_are_refused() -> None:
    doc = json.loads((REPO / "bench" / "results" / "robustness.json").read_text())
    other = {**doc, "seeds": [HELDOUT_FIRST_SEED + 1, HELDOUT_FIRST_SEED + 1 + doc["scenes_per_condition"]]}
    with pytest.raises(ValueError, match="other scenes"):
        table(doc, other)
