"""The held-out scene generator of issue 20 (bench.heldout_scenes): deterministic, boxes tight and inside
the frame, each condition holds what it names; and models/README.md's robustness table is the JSON's."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dla_infer_node.bench.heldout_scenes import CONDITIONS, heldout_scene
from dla_infer_node.bench.robustness import table

REPO = Path(__file__).resolve().parents[1]
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


def test_models_readme_robustness_table_is_the_benchmark_json() -> None:
    doc = json.loads((REPO / "bench" / "results" / "robustness.json").read_text())
    assert set(doc["results"]) == set(CONDITIONS)
    assert table(doc) in (REPO / "models" / "README.md").read_text()
