"""Synthetic scenes with ground truth: the data the project's detector is trained and judged on.

Everything is drawn with numpy + OpenCV from one ``numpy.random.Generator`` seeded by ``seed``, so a seed
always yields the same image and boxes (for a given OpenCV build).

Ground-truth convention
-----------------------
* Coordinates are continuous pixel coordinates with the pixel-corner convention: pixel ``(i, j)`` covers
  ``[i, i+1) x [j, j+1)``. This is the convention :class:`dla_infer_node.core.preprocess.Letterbox` maps with.
* A box is the tight box of the object's FULL outline (amodal: parts hidden behind later objects still
  count), clipped to the image ``[0, width] x [0, height]``.
* Objects are drawn in list order; a later object may cover earlier ones, but a placement is rejected when it
  would leave an earlier object with less than ``MIN_VISIBLE`` of its in-image area visible, so every
  labelled object stays recognisable and its box stays inferable. An object cut by the image border keeps at
  least ``MIN_INSIDE`` of its area inside the image.
* Background clutter (lines, fuzzy blobs, stripes, noise) is never a labelled class: it avoids crisp closed
  forms on purpose.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import cv2
import numpy as np

CLASS_NAMES: tuple[str, ...] = (
    "circle", "square", "triangle", "star", "cross", "ring", "hexagon", "arrow",
)
MIN_VISIBLE = 0.7   # fraction of an object's in-image area that occluders must leave visible
MIN_INSIDE = 0.6    # fraction of an object's area that must lie inside the image (border truncation)
RADIUS_RANGE = (14.0, 80.0)  # object "radius" in pixels for a 640x480 scene (scaled with the scene size)
_SHIFT = 4                   # fixed-point bits for cv2.fillPoly: sub-pixel accurate outlines
_CIRCLE_POINTS = 48


@dataclass(frozen=True)
class Scene:
    image: np.ndarray        # (H, W, 3) uint8, RGB
    boxes: np.ndarray        # (N, 4) float32 xyxy, pixel-corner convention, clipped to the image
    class_ids: np.ndarray    # (N,) int64 indices into CLASS_NAMES
    visible: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))  # (N,) visible fraction
    class_names: tuple[str, ...] = CLASS_NAMES


def _circle(n: int, r: float = 1.0) -> np.ndarray:
    t = np.linspace(0.0, 2.0 * math.pi, n, endpoint=False)
    return np.stack([r * np.cos(t), r * np.sin(t)], axis=1)


def _star(points: int = 5, inner: float = 0.45) -> np.ndarray:
    t = np.arange(2 * points) * math.pi / points - math.pi / 2
    r = np.where(np.arange(2 * points) % 2 == 0, 1.0, inner)
    return np.stack([r * np.cos(t), r * np.sin(t)], axis=1)


def _cross(w: float = 0.34) -> np.ndarray:
    return np.array([(-w, -1), (w, -1), (w, -w), (1, -w), (1, w), (w, w), (w, 1), (-w, 1), (-w, w),
                     (-1, w), (-1, -w), (-w, -w)], dtype=np.float64)


def _arrow() -> np.ndarray:
    return np.array([(-1.0, -0.26), (0.15, -0.26), (0.15, -0.68), (1.0, 0.0), (0.15, 0.68),
                     (0.15, 0.26), (-1.0, 0.26)], dtype=np.float64)


# Unit outlines (radius ~1, centred); a list of polygons, the second (if any) is a hole.
_SHAPES: dict[str, list[np.ndarray]] = {
    "circle": [_circle(_CIRCLE_POINTS)],
    "square": [np.array([(-0.82, -0.82), (0.82, -0.82), (0.82, 0.82), (-0.82, 0.82)], dtype=np.float64)],
    "triangle": [_circle(3) @ np.array([[0.0, -1.0], [1.0, 0.0]]) + np.array([0.0, 0.12])],
    "star": [_star()],
    "cross": [_cross()],
    "ring": [_circle(_CIRCLE_POINTS), _circle(_CIRCLE_POINTS, 0.56)],
    "hexagon": [_circle(6)],
    "arrow": [_arrow()],
}


def _noise_bank() -> np.ndarray:
    # One fixed bank of gaussian noise (uint8, mean 128, sigma _BANK_SIGMA), cropped at a seeded offset per
    # scene: per-pixel noise that is deterministic by seed yet costs a slice instead of ~1M normal draws.
    rng = np.random.default_rng(20240601)
    bank = rng.standard_normal((1200, 1600, 3)) * _BANK_SIGMA + 128.0
    return np.clip(bank, 0, 255).astype(np.uint8)


_BANK_SIGMA = 24.0
_BANK: np.ndarray | None = None


def _noise(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    global _BANK
    if _BANK is None:
        _BANK = _noise_bank()
    src = _BANK
    if h > src.shape[0] or w > src.shape[1]:  # very large scenes: tile the bank
        src = np.tile(src, (h // src.shape[0] + 1, w // src.shape[1] + 1, 1))
    y = int(rng.integers(0, src.shape[0] - h + 1))
    x = int(rng.integers(0, src.shape[1] - w + 1))
    return src[y:y + h, x:x + w]


def _background(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    base = rng.uniform(20, 235, size=3)
    # low-frequency colour field: a tiny random grid resized up (cheap "cloudy" texture)
    gh, gw = int(rng.integers(2, 7)), int(rng.integers(2, 9))
    grid = rng.uniform(-1, 1, size=(gh, gw, 3)) * float(rng.uniform(15, 70)) + base
    img = cv2.resize(np.clip(grid, 0, 255).astype(np.uint8), (w, h), interpolation=cv2.INTER_LINEAR)
    # the texture layers are computed at quarter resolution and resized: they are smooth anyway
    qh, qw = max(h // 4, 1), max(w // 4, 1)
    if rng.random() < 0.35:  # stripes
        yy, xx = np.mgrid[0:qh, 0:qw].astype(np.float32)
        ang = rng.uniform(0, math.pi)
        period = rng.uniform(8, 40) / 4
        st = np.sin((xx * math.cos(ang) + yy * math.sin(ang)) * (2 * math.pi / period))
        amp = rng.uniform(5, 30, size=3).astype(np.float32)
        layer = cv2.resize((st[..., None] * amp + 128).astype(np.uint8), (w, h))
        img = cv2.addWeighted(img, 1.0, layer, 1.0, -128.0)
    # clutter: line segments and polylines (open curves, never closed forms)
    for _ in range(int(rng.integers(0, 14))):
        p = rng.uniform([-50, -50], [w + 50, h + 50], size=(int(rng.integers(2, 5)), 2))
        color = tuple(int(c) for c in rng.integers(0, 256, size=3))
        cv2.polylines(img, [np.round(p).astype(np.int32)], False, color, int(rng.integers(1, 4)),
                      cv2.LINE_AA)
    # fuzzy blobs: heavily blurred so they read as stains, not as circles
    n_blobs = int(rng.integers(0, 5))
    if n_blobs:
        layer = np.zeros((qh, qw, 3), np.uint8)
        mask = np.zeros((qh, qw), np.uint8)
        for _ in range(n_blobs):
            c = (int(rng.integers(0, qw)), int(rng.integers(0, qh)))
            ax = (int(rng.integers(3, 20)), int(rng.integers(3, 20)))
            ang_d = float(rng.uniform(0, 180))
            color = tuple(int(v) for v in rng.integers(0, 256, size=3))
            cv2.ellipse(layer, c, ax, ang_d, 0, 360, color, -1)
            cv2.ellipse(mask, c, ax, ang_d, 0, 360, 255, -1)
        layer = cv2.resize(cv2.GaussianBlur(layer, (11, 11), 0), (w, h))
        alpha = cv2.resize(cv2.GaussianBlur(mask, (11, 11), 0), (w, h))
        a3 = cv2.merge([alpha, alpha, alpha])
        # img*(1-0.6a) + layer*0.6a, in integer arithmetic
        img = cv2.add(cv2.multiply(img, 255 - (a3 * 0.6).astype(np.uint8), scale=1 / 255),
                      cv2.multiply(layer, (a3 * 0.6).astype(np.uint8), scale=1 / 255))
    return img


def _pick_color(rng: np.random.Generator, ref: np.ndarray) -> np.ndarray:
    # an object colour that stands out from the local background (L1 distance), so every label is visible
    best, best_d = None, -1.0
    for _ in range(12):
        c = rng.integers(0, 256, size=3).astype(np.float32)
        d = float(np.abs(c - ref).sum())
        if d >= 150:
            return c
        if d > best_d:
            best, best_d = c, d
    assert best is not None
    return best


def _outline(rng: np.random.Generator, cls: str, cx: float, cy: float, r: float) -> list[np.ndarray]:
    aspect = math.exp(rng.uniform(math.log(0.65), math.log(1.5)))
    sx, sy = r * math.sqrt(aspect), r / math.sqrt(aspect)
    th = rng.uniform(0, 2 * math.pi)
    rot = np.array([[math.cos(th), -math.sin(th)], [math.sin(th), math.cos(th)]])
    return [(poly * np.array([sx, sy])) @ rot.T + np.array([cx, cy]) for poly in _SHAPES[cls]]


def generate_scene(seed: int, width: int = 640, height: int = 480, *, min_objects: int = 3,
                   max_objects: int = 10) -> Scene:
    """Draw one scene. Deterministic by ``seed`` (and the scene size / object-count range).

    The object count is drawn from [min_objects, max_objects]; placements that break the occlusion or
    truncation caps are skipped, so crowded requests may yield fewer objects.
    """
    if width < 32 or height < 32:
        raise ValueError(f"scene must be at least 32x32, got {width}x{height}")
    if not 0 <= min_objects <= max_objects:
        raise ValueError(f"need 0 <= min_objects <= max_objects, got {min_objects}, {max_objects}")
    rng = np.random.default_rng(seed)
    h, w = height, width
    img = _background(rng, h, w)
    owner = np.full((h, w), -1, np.int16)        # which object a pixel shows (-1: background)
    area_in: list[int] = []                       # in-image pixel count of each object
    vis: list[int] = []                           # its currently visible pixel count
    boxes: list[list[float]] = []
    classes: list[int] = []
    scale = math.sqrt((w * h) / (640.0 * 480.0))
    n_target = int(rng.integers(min_objects, max_objects + 1))
    for _ in range(n_target * 4):                 # attempts; rejected placements are simply skipped
        if len(boxes) >= n_target:
            break
        cls_id = int(rng.integers(0, len(CLASS_NAMES)))
        # log-uniform size: as many small objects as large ones
        r = math.exp(rng.uniform(math.log(RADIUS_RANGE[0]), math.log(RADIUS_RANGE[1]))) * scale
        cx, cy = rng.uniform(-0.3 * r, w + 0.3 * r), rng.uniform(-0.3 * r, h + 0.3 * r)
        polys = _outline(rng, CLASS_NAMES[cls_id], cx, cy, r)
        pts = polys[0]
        x0f, y0f = pts.min(axis=0)
        x1f, y1f = pts.max(axis=0)
        # local raster window around the outline (integer pixels), unclipped then clipped
        ux0, uy0 = math.floor(x0f) - 1, math.floor(y0f) - 1
        ux1, uy1 = math.ceil(x1f) + 1, math.ceil(y1f) + 1
        local = np.zeros((uy1 - uy0, ux1 - ux0), np.uint8)
        # pixel centre of pixel (i, j) is (i+0.5, j+0.5) in our convention; cv2 puts it at (i, j)
        fp = [np.round((p - [ux0 + 0.5, uy0 + 0.5]) * (1 << _SHIFT)).astype(np.int32) for p in polys]
        cv2.fillPoly(local, fp[:1], 255, cv2.LINE_AA, _SHIFT)
        if len(fp) > 1:
            cv2.fillPoly(local, fp[1:], 0, cv2.LINE_AA, _SHIFT)
        full_area = int(np.count_nonzero(local > 127))
        cx0, cy0, cx1, cy1 = max(ux0, 0), max(uy0, 0), min(ux1, w), min(uy1, h)
        if full_area == 0 or cx1 <= cx0 or cy1 <= cy0:
            continue
        alpha = local[cy0 - uy0:cy1 - uy0, cx0 - ux0:cx1 - ux0]
        solid = alpha > 127
        inside = int(np.count_nonzero(solid))
        if inside < MIN_INSIDE * full_area or inside < 30:
            continue
        covered = owner[cy0:cy1, cx0:cx1][solid]
        hits: np.ndarray = np.bincount(covered[covered >= 0], minlength=len(boxes))
        if any(vis[j] - int(n) < MIN_VISIBLE * area_in[j] for j, n in enumerate(hits) if n):
            continue
        for j, n in enumerate(hits):
            vis[j] -= int(n)
        owner[cy0:cy1, cx0:cx1][solid] = len(boxes)
        region = img[cy0:cy1, cx0:cx1]
        color = _pick_color(rng, region.reshape(-1, 3).mean(axis=0))
        fill = np.empty(region.shape, np.float32)
        fill[:] = color
        if rng.random() < 0.5:  # soft shading across the object: not every object is flat colour
            gy = np.linspace(-1, 1, region.shape[0], dtype=np.float32)[:, None, None]
            fill += gy * float(rng.uniform(-40, 40))
        a = alpha.astype(np.float32)[..., None] * (1.0 / 255.0)
        region[:] = np.clip(region * (1 - a) + fill * a, 0, 255).astype(np.uint8)
        if rng.random() < 0.3:  # outline in a contrasting tone
            edge = tuple(int(v) for v in (255 - color))
            shifted = [(p - [0.5, 0.5]) * (1 << _SHIFT) for p in polys]
            cv2.polylines(img, [np.round(s).astype(np.int32) for s in shifted], True, edge,
                          int(rng.integers(1, 3)), cv2.LINE_AA, _SHIFT)
        area_in.append(inside)
        vis.append(inside)
        boxes.append([max(x0f, 0.0), max(y0f, 0.0), min(x1f, float(w)), min(y1f, float(h))])
        classes.append(cls_id)
    img = _photometric(rng, img)
    return Scene(
        image=img,
        boxes=np.asarray(boxes, np.float32).reshape(-1, 4),
        class_ids=np.asarray(classes, np.int64),
        visible=np.asarray([v / a for v, a in zip(vis, area_in, strict=True)], np.float32),
    )


def _photometric(rng: np.random.Generator, img: np.ndarray) -> np.ndarray:
    h, w = img.shape[:2]
    if rng.random() < 0.35:
        k = int(rng.choice([3, 5]))
        img = cv2.GaussianBlur(img, (k, k), 0)
    gain = float(rng.uniform(0.6, 1.3))
    bias = float(rng.uniform(-40, 40))
    sigma = float(rng.uniform(0, 14))
    # brightness/contrast through a lookup table (saturating), then additive noise from the bank
    lut = np.clip(np.arange(256, dtype=np.float32) * gain + bias, 0, 255).astype(np.uint8)
    img = cv2.LUT(img, lut)
    if sigma > 0.5:
        gain_n = sigma / _BANK_SIGMA
        img = cv2.addWeighted(img, 1.0, _noise(rng, h, w), gain_n, -128.0 * gain_n)
    return np.ascontiguousarray(img)
