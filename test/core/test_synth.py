"""The synthetic scene generator: determinism, valid ground truth, variety."""

from __future__ import annotations

import numpy as np
import pytest

from dla_infer_node.core.synth import CLASS_NAMES, MIN_VISIBLE, generate_scene


def test_same_seed_same_scene() -> None:
    a, b = generate_scene(1234), generate_scene(1234)
    assert np.array_equal(a.image, b.image)
    assert np.array_equal(a.boxes, b.boxes)
    assert np.array_equal(a.class_ids, b.class_ids)


def test_different_seeds_differ() -> None:
    a, b = generate_scene(1), generate_scene(2)
    assert not np.array_equal(a.image, b.image)


@pytest.mark.parametrize(("width", "height"), [(640, 480), (320, 240), (1280, 720), (97, 61)])
def test_ground_truth_is_valid(width: int, height: int) -> None:
    for seed in range(20):
        s = generate_scene(seed, width, height)
        assert s.image.shape == (height, width, 3)
        assert s.image.dtype == np.uint8
        assert s.boxes.dtype == np.float32 and s.boxes.shape == (len(s.class_ids), 4)
        assert s.class_ids.dtype == np.int64
        assert np.all(s.boxes[:, 0] >= 0) and np.all(s.boxes[:, 1] >= 0)
        assert np.all(s.boxes[:, 2] <= width) and np.all(s.boxes[:, 3] <= height)
        assert np.all(s.boxes[:, 2] > s.boxes[:, 0]) and np.all(s.boxes[:, 3] > s.boxes[:, 1])
        assert np.all((s.class_ids >= 0) & (s.class_ids < len(CLASS_NAMES)))
        assert np.all(s.visible >= MIN_VISIBLE - 1e-6)
        assert s.class_names == CLASS_NAMES


def test_variety() -> None:
    scenes = [generate_scene(seed) for seed in range(100)]
    classes = np.concatenate([s.class_ids for s in scenes])
    boxes = np.concatenate([s.boxes for s in scenes])
    counts = np.bincount(classes, minlength=len(CLASS_NAMES))
    assert len(CLASS_NAMES) >= 6
    assert counts.min() > 0.5 * counts.mean()            # every class well represented
    sizes = np.sqrt((boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1]))
    assert sizes.min() < 35 and sizes.max() > 120         # small and large objects
    at_border = (boxes[:, 0] == 0) | (boxes[:, 1] == 0) | (boxes[:, 2] == 640) | (boxes[:, 3] == 480)
    assert at_border.any()                                # truncation happens
    visible = np.concatenate([s.visible for s in scenes])
    assert (visible < 0.95).any()                         # occlusion happens
    means = np.array([s.image.reshape(-1, 3).mean(axis=0) for s in scenes])
    assert means.std(axis=0).min() > 15                   # backgrounds vary in colour/brightness
    assert all(3 <= len(s.class_ids) <= 10 for s in scenes)


def test_objects_are_drawn() -> None:
    # the pixels inside a box differ from the scene outside: the label marks something visible
    s = generate_scene(7)
    for box in s.boxes:
        x0, y0, x1, y1 = (int(v) for v in box)
        assert s.image[y0:y1 + 1, x0:x1 + 1].std() > 5
