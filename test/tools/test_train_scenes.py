"""tools/train_scenes.py, the broad training scenes: deterministic, labels that match what is
drawn, and the coverage they are for (sizes up to most of the frame, outlines, frame shapes).

Training-time code, but it needs only numpy and OpenCV, so the core suite checks it without torch.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from dla_infer_node.core.synth import CLASS_NAMES

TOOL = Path(__file__).resolve().parents[2] / "tools" / "train_scenes.py"


@pytest.fixture(scope="module")
def scenes_mod() -> ModuleType:
    spec = importlib.util.spec_from_file_location("train_scenes_under_test", TOOL)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_same_seed_same_scene(scenes_mod: ModuleType) -> None:
    a, b = scenes_mod.broad_scene(17), scenes_mod.broad_scene(17)
    assert np.array_equal(a.image, b.image) and np.array_equal(a.boxes, b.boxes)
    assert np.array_equal(a.class_ids, b.class_ids)
    assert not np.array_equal(a.image, scenes_mod.broad_scene(18).image)


def test_coverage_over_many_scenes(scenes_mod: ModuleType) -> None:
    frames, rel_sides, sides, classes = set(), [], [], []
    for seed in range(150):
        s = scenes_mod.broad_scene(seed)
        h, w = s.image.shape[:2]
        frames.add((w, h))
        assert s.image.dtype == np.uint8 and s.image.shape[2] == 3
        assert len(s.boxes) == len(s.class_ids)
        if len(s.boxes):
            assert np.all(s.boxes[:, :2] >= 0) and np.all(s.boxes[:, 2] <= w) and np.all(s.boxes[:, 3] <= h)
            assert np.all(s.boxes[:, 2:] > s.boxes[:, :2])
            side = np.maximum(s.boxes[:, 2] - s.boxes[:, 0], s.boxes[:, 3] - s.boxes[:, 1])
            sides += list(side)
            rel_sides += list(side / min(w, h))
            classes += list(s.class_ids)
    assert any(h > w for w, h in frames) and any(w > h for w, h in frames) and len(frames) >= 4
    assert set(classes) == set(range(len(CLASS_NAMES)))
    assert min(sides) < 16                      # small objects
    assert sum(r > 0.6 for r in rel_sides) >= 20  # large ones are common, not a tail
    assert max(rel_sides) > 0.85


def test_boxes_hold_what_is_drawn(scenes_mod: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a flat background without camera effects, every visibly changed pixel lies in a labelled box, and
    each box is tight: drawn pixels reach (within 2 px) both ends of it in x and in y (where the frame cut
    the object, its edge is the box's)."""
    monkeypatch.setattr(scenes_mod, "_background",
                        lambda rng, h, w: np.full((h, w, 3), 128, np.uint8))
    monkeypatch.setattr(scenes_mod, "_clutter", lambda rng, img: None)
    monkeypatch.setattr(scenes_mod, "_camera", lambda rng, img: img)
    checked = 0
    for seed in range(40):
        s = scenes_mod.broad_scene(seed)
        # at least a few % coverage (object colours differ from the background by >= 90 in L1). The box is
        # the analytic outline (as the held-out scenes' is); anti-aliasing and whole-pixel vertices tint
        # pixels up to 2 px beyond it (measured), never more
        changed = np.abs(s.image.astype(np.int16) - 128).max(axis=2) >= 6
        inside = np.zeros_like(changed)
        for x0, y0, x1, y1 in s.boxes:
            inside[max(int(y0) - 2, 0):int(np.ceil(y1)) + 2, max(int(x0) - 2, 0):int(np.ceil(x1)) + 2] = True
        assert not np.any(changed & ~inside), f"seed {seed}: drawn pixels outside every box"
        for x0, y0, x1, y1 in s.boxes:
            if len(s.boxes) > 1:
                continue  # an occluder may own a box's edge pixels; single-object scenes prove tightness
            ys, xs = np.nonzero(changed[int(y0):int(np.ceil(y1)), int(x0):int(np.ceil(x1))])
            assert xs.min() <= 2 and ys.min() <= 2, (seed, xs.min(), ys.min())
            assert xs.max() >= (np.ceil(x1) - int(x0)) - 3 and ys.max() >= (np.ceil(y1) - int(y0)) - 3
            checked += 1
    assert checked >= 3
