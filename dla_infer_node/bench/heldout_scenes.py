"""Held-out scenes drawn by other code than the training generator (``core.synth``): the robustness check
of the shipped model. Same eight classes; shapes are built and drawn here independently (OpenCV ellipses
for round shapes, own polygon parameters, outlines with ``cv2.polylines``), with conditions the training
generator does not vary the same way, so a score here says how the detector holds up away from its
training data.

A condition fixes one factor and draws the others from their full range:
  size    small (longest side 12-32 px), medium (32-96 px), large (96 px to 90 % of the frame height)
  style   filled, outlined (line width 2-6 px, at most a tenth of the object's side and at least 1 px)
  background  flat, gradient, noise (blurred noise texture)
Objects lie wholly inside the frame and do not overlap; the box is the tight box of what is drawn.
Seeds start at 50,000,000 (training: below 1e6; evaluate: 1e7+; tests: 2e7+; calibration: 3e7+).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import cv2
import numpy as np

from dla_infer_node.core.synth import CLASS_NAMES

HELDOUT_FIRST_SEED = 50_000_000
CONDITIONS: dict[str, dict[str, str]] = {
    "all": {},
    "small": {"size": "small"}, "medium": {"size": "medium"}, "large": {"size": "large"},
    "filled": {"style": "filled"}, "outlined": {"style": "outlined"},
    "flat_background": {"background": "flat"}, "gradient_background": {"background": "gradient"},
    "noise_background": {"background": "noise"},
}


@dataclass(frozen=True)
class HeldoutScene:
    image: np.ndarray  # (H, W, 3) uint8 RGB
    boxes: np.ndarray  # (N, 4) xyxy
    class_ids: np.ndarray


def _regular(n: int, phase: float) -> np.ndarray:
    a = phase + 2 * math.pi * np.arange(n) / n
    return np.stack([np.cos(a), np.sin(a)], axis=1)


def _unit_shape(name: str) -> np.ndarray:
    """Unit-sized outline (half-extent about 1) of a polygonal class."""
    if name == "square":
        return _regular(4, math.pi / 4) * math.sqrt(2) * 0.85
    if name == "triangle":
        return _regular(3, -math.pi / 2) * 1.05 + np.array([0.0, 0.15])
    if name == "hexagon":
        return _regular(6, 0.0)
    if name == "star":
        outer, inner = _regular(5, -math.pi / 2), _regular(5, -math.pi / 2 + math.pi / 5) * 0.5
        return np.stack([outer, inner], axis=1).reshape(-1, 2)
    if name == "cross":
        w = 0.38
        quarter = [(w, -1.0), (w, -w), (1.0, -w)]
        pts: list[tuple[float, float]] = []
        for k in range(4):  # the same corner turned four times
            c, s = round(math.cos(k * math.pi / 2)), round(math.sin(k * math.pi / 2))
            pts += [(x * c - y * s, x * s + y * c) for x, y in quarter]
        return np.array(pts)
    if name == "arrow":
        return np.array([(-1.0, -0.3), (0.2, -0.3), (0.2, -0.7), (1.0, 0.0), (0.2, 0.7), (0.2, 0.3),
                         (-1.0, 0.3)])
    raise ValueError(name)


def outline_width(drawn: int, side: float) -> int:
    """The line width of an outline: the drawn 2-6 px, but at most a tenth of the object's side (at least
    1 px). A thicker outline is no longer its class: a circle's band becomes a ring's, a small hexagon a
    blob, so its label would be wrong, not hard."""
    return min(drawn, max(1, round(side / 10)))


def _background(rng: np.random.Generator, kind: str, h: int, w: int) -> np.ndarray:
    if kind == "flat":
        return np.full((h, w, 3), rng.integers(0, 256, 3), np.uint8)
    if kind == "gradient":
        a, b = rng.integers(0, 256, 3).astype(float), rng.integers(0, 256, 3).astype(float)
        th = rng.uniform(0, 2 * math.pi)
        yy, xx = np.mgrid[0:h, 0:w]
        t = (xx * math.cos(th) + yy * math.sin(th)).astype(float)
        t = (t - t.min()) / max(t.max() - t.min(), 1.0)
        return (a + (b - a) * t[..., None]).astype(np.uint8)
    # a textured surface: blurred noise, mostly brightness with a little colour
    noise = rng.normal(0, 1, (h // 4 + 1, w // 4 + 1, 3)) * np.array([1.0, 0.25, 0.25])
    noise = cv2.resize(cv2.GaussianBlur(noise, (0, 0), rng.uniform(0.8, 3.0)), (w, h))
    noise = noise @ np.array([[1.0, 1.0, 1.0], [1.0, -1.0, 0.0], [0.0, 1.0, -1.0]])
    base = rng.integers(40, 216, 3).astype(float)
    return np.clip(base + noise / max(noise.std(), 1e-6) * rng.uniform(10, 35), 0, 255).astype(np.uint8)


def _size_range(kind: str, h: int) -> tuple[float, float]:
    ranges = {"small": (12.0, 32.0), "medium": (32.0, 96.0), "large": (96.0, 0.9 * h)}
    return ranges.get(kind, (12.0, 0.9 * h))


def _contrasting(rng: np.random.Generator, under: np.ndarray) -> np.ndarray:
    mean = under.reshape(-1, 3).mean(axis=0)
    for _ in range(50):
        c = rng.integers(0, 256, 3)
        if abs(float(c.mean()) - float(mean.mean())) > 70:
            return c
    return np.where(mean > 127, 0, 255).astype(np.int64)


def draw_object(img: np.ndarray, name: str, cx: float, cy: float, half: float, th: float, outlined: bool,
          width: int, color: tuple[int, ...]) -> np.ndarray:
    """Draws one object; returns its tight box. OpenCV puts integer coordinates at pixel centres, the
    boxes (as everywhere in the package) have pixel (i, j) covering [i, i+1) x [j, j+1): hence the 0.5."""
    if name in ("circle", "ring"):
        r, centre = round(half), (int(cx), int(cy))
        if name == "circle":
            cv2.circle(img, centre, r, color, width if outlined else -1, cv2.LINE_AA)
            e = r + (width / 2 if outlined else 0.0)
        else:  # a ring: a thick annulus, or two concentric outlines
            thick = max(2, round(0.4 * r)) if not outlined else width
            cv2.circle(img, centre, r - thick // 2, color, thick, cv2.LINE_AA)
            if outlined:
                cv2.circle(img, centre, int(0.55 * r), color, width, cv2.LINE_AA)
            e = r - thick // 2 + thick / 2
        x, y = centre[0] + 0.5, centre[1] + 0.5
        return np.array([x - e, y - e, x + e, y + e])
    rot = np.array([[math.cos(th), -math.sin(th)], [math.sin(th), math.cos(th)]])
    pts = _unit_shape(name) * half @ rot.T + np.array([cx, cy])
    poly = np.round(pts).astype(np.int32).reshape(-1, 1, 2)
    if outlined:
        cv2.polylines(img, [poly], True, color, width, cv2.LINE_AA)
    else:
        cv2.fillPoly(img, [poly], color, cv2.LINE_AA)
    grow = width / 2 if outlined else 0.0
    drawn = poly.reshape(-1, 2) + 0.5
    return np.array([*(drawn.min(axis=0) - grow), *(drawn.max(axis=0) + grow)])


def heldout_scene(seed: int, condition: str = "all", width: int = 640, height: int = 480) -> HeldoutScene:
    """One scene of ``condition`` (a key of :data:`CONDITIONS`), deterministic by seed."""
    fixed = CONDITIONS[condition]
    rng = np.random.default_rng(seed)
    bg = fixed.get("background") or str(rng.choice(["flat", "gradient", "noise"]))
    img = _background(rng, bg, height, width)
    lo, hi = _size_range(fixed.get("size", ""), height)
    boxes: list[np.ndarray] = []
    ids: list[int] = []
    for _ in range(int(rng.integers(1, 3 if lo >= 96 else 7))):
        cls = int(rng.integers(0, len(CLASS_NAMES)))
        side = math.exp(rng.uniform(math.log(lo), math.log(hi)))
        half = side / 2
        outlined = (fixed.get("style") or ("outlined" if rng.uniform() < 0.5 else "filled")) == "outlined"
        lw = outline_width(int(rng.integers(2, 7)), side)
        for _try in range(40):
            cx, cy = rng.uniform(half + lw, width - half - lw), rng.uniform(half + lw, height - half - lw)
            box = np.array([cx - half - lw, cy - half - lw, cx + half + lw, cy + half + lw])
            if all(box[2] < b[0] or b[2] < box[0] or box[3] < b[1] or b[3] < box[1] for b in boxes):
                break
        else:
            continue
        y0, y1 = int(max(cy - half, 0)), int(min(cy + half, height))
        x0, x1 = int(max(cx - half, 0)), int(min(cx + half, width))
        color = tuple(int(v) for v in _contrasting(rng, img[y0:y1 + 1, x0:x1 + 1]))
        turn = rng.uniform(0, 2 * math.pi)
        drawn = draw_object(img, CLASS_NAMES[cls], cx, cy, half, turn, outlined, lw, color)
        boxes.append(np.clip(drawn, 0, [width, height, width, height]))
        ids.append(cls)
    return HeldoutScene(img, np.array(boxes, np.float32).reshape(-1, 4), np.array(ids, np.int64))
