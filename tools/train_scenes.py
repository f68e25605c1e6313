"""Broad training scenes: what a camera shows beyond ``core.synth``'s tidy scenes.

``core.synth`` draws the package's evaluation scenes: mid-sized, mostly filled objects on cloudy
backgrounds. A detector trained only on those misses large objects and outlined shapes elsewhere. The scenes
drawn here vary, per scene or per object:

* object size: longest side from ~10 px up to 95 % of the frame's short side, in three regimes (many small
  and medium objects / all sizes / one to three large ones), so large objects are common, not a tail;
* style: filled (flat or shaded) or outlined with line widths 1-9 px (at most a tenth of the object's
  side: a thicker outline would turn a circle into a ring); class proportions jittered (star
  depth, cross arm width, ring hole, arrow head) so no one drawing of a class is learnt by heart;
* rotation, partial occlusion (a later object may hide up to 35 % of an earlier one's box) and truncation
  at the frame edge (at least 60 % of the box inside);
* backgrounds: flat, linear or radial gradient, noise texture, stripes, cloudy, with open clutter lines;
* camera effects: blur (Gaussian or motion), sensor noise, exposure, gamma, white balance, JPEG artefacts;
* frame shape: 4:3, 16:9, square and portrait frames (letterboxed by train_data).

Boxes follow ``core.synth``'s convention: the tight box of the whole (amodal) outline, clipped to the
image; an outline's box includes half its line width (anti-aliasing may tint a pixel beyond it). The box is
the analytic one, as the scene says where it draws. Deterministic by seed. Training-time code only.
"""

from __future__ import annotations

import math

import cv2
import numpy as np

from dla_infer_node.core.synth import CLASS_NAMES, Scene

FRAME_SIZES = [(640, 480)] * 5 + [(640, 360), (800, 450), (480, 640), (360, 640), (512, 512), (800, 600)]
MAX_HIDDEN = 0.35   # share of an earlier object's box a later one may cover
MIN_INSIDE = 0.6    # share of an object's box inside the frame
_SHIFT = 3          # fixed-point bits for sub-pixel outlines
OUTLINE_SHARE = 10  # an outline's line width is at most side / OUTLINE_SHARE (and at least 1 px)


def _ring_points(n: int, r: float = 1.0, phase: float = 0.0) -> np.ndarray:
    t = phase + np.arange(n) * (2 * math.pi / n)
    return np.stack([r * np.cos(t), r * np.sin(t)], axis=1)


def _unit_polygons(rng: np.random.Generator, name: str) -> list[np.ndarray]:
    """Outline(s) of one class, half-extent about 1, with jittered proportions; a second polygon is a hole."""
    if name == "circle":
        return [_ring_points(64)]
    if name == "ring":
        return [_ring_points(64), _ring_points(64, rng.uniform(0.45, 0.7))]
    if name == "square":
        return [_ring_points(4, 1.0, math.pi / 4)]
    if name == "triangle":
        return [_ring_points(3, 1.0, -math.pi / 2) + np.array([0.0, 0.15])]
    if name == "hexagon":
        return [_ring_points(6)]
    if name == "star":
        pts = _ring_points(10, 1.0, -math.pi / 2)
        pts[1::2] *= rng.uniform(0.38, 0.58)
        return [pts]
    if name == "cross":
        a = rng.uniform(0.24, 0.44)
        arm = np.array([(a, -1.0), (a, -a), (1.0, -a)])
        turns = [arm @ np.array([[math.cos(k * math.pi / 2), math.sin(k * math.pi / 2)],
                                 [-math.sin(k * math.pi / 2), math.cos(k * math.pi / 2)]]) for k in range(4)]
        return [np.concatenate(turns)]
    if name == "arrow":
        shaft, head_x, head_h = rng.uniform(0.2, 0.36), rng.uniform(0.0, 0.35), rng.uniform(0.6, 0.8)
        return [np.array([(-1.0, -shaft), (head_x, -shaft), (head_x, -head_h), (1.0, 0.0),
                          (head_x, head_h), (head_x, shaft), (-1.0, shaft)])]
    raise ValueError(name)


def _background(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    kind = rng.choice(["flat", "linear", "radial", "noise", "stripes", "cloudy"])
    a, b = rng.uniform(0, 255, 3), rng.uniform(0, 255, 3)
    if kind == "flat":
        return np.full((h, w, 3), a, np.uint8)
    qh, qw = h // 4 + 1, w // 4 + 1   # smooth layers are made at quarter size and resized
    yy, xx = np.mgrid[0:qh, 0:qw].astype(np.float32)
    if kind == "linear":
        th = rng.uniform(0, 2 * math.pi)
        t = xx * math.cos(th) + yy * math.sin(th)
    elif kind == "radial":
        t = np.hypot(xx - rng.uniform(0, qw), yy - rng.uniform(0, qh))
    elif kind == "stripes":
        th, period = rng.uniform(0, math.pi), rng.uniform(2, 12)
        t = 0.5 + 0.5 * np.sin((xx * math.cos(th) + yy * math.sin(th)) * (2 * math.pi / period))
        a = a * 0.5 + b * 0.5 + rng.uniform(-40, 40, 3)  # low-contrast stripes: a texture, not edges
    elif kind == "cloudy":
        gh, gw = int(rng.integers(2, 7)), int(rng.integers(2, 9))
        grid = rng.uniform(0, 1, (gh, gw)).astype(np.float32)
        t = cv2.resize(grid, (qw, qh), interpolation=cv2.INTER_CUBIC)
    else:  # noise texture: blurred noise, several grain sizes
        t = cv2.GaussianBlur(rng.standard_normal((qh, qw)).astype(np.float32), (0, 0), rng.uniform(0.6, 4.0))
        b = a + rng.uniform(-70, 70, 3)
    t = (t - t.min()) / max(float(t.max() - t.min()), 1e-6)
    img = a + (b - a) * cv2.resize(t, (w, h))[..., None]
    return np.clip(img, 0, 255).astype(np.uint8)


def _clutter(rng: np.random.Generator, img: np.ndarray) -> None:
    """Open polylines: edges that are never one of the classes' closed forms."""
    h, w = img.shape[:2]
    for _ in range(int(rng.integers(0, 10))):
        p = rng.uniform([-40, -40], [w + 40, h + 40], (int(rng.integers(2, 5)), 2))
        colour = tuple(int(v) for v in rng.integers(0, 256, 3))
        thickness = int(rng.integers(1, 4))
        cv2.polylines(img, [np.round(p).astype(np.int32)], False, colour, thickness, cv2.LINE_AA)


def _colour(rng: np.random.Generator, under: np.ndarray) -> np.ndarray:
    """A colour that stands out from the mean under the object; now and then only just (low contrast)."""
    need = 90.0 if rng.random() < 0.2 else 150.0
    best, best_d = np.zeros(3), -1.0
    for _ in range(16):
        c = rng.uniform(0, 255, 3)
        d = float(np.abs(c - under).sum())
        if d >= need:
            return c
        if d > best_d:
            best, best_d = c, d
    return best


def _size_regime(rng: np.random.Generator, short: int) -> tuple[float, float, int, int]:
    """(min side, max side, min count, max count) of one scene's objects; sides are drawn log-uniform,
    except in the large regime (min count 1), where they are uniform: more of the very largest."""
    r = rng.random()
    if r < 0.25:
        return 10.0, 0.22 * short, 4, 14
    if r < 0.55:
        return 10.0, 0.95 * short, 2, 8
    # large objects get their own, most common regime: at the deployed scale only the larger training
    # windows (train_data.BIG_CROP) hold them, so they are scarce in what a step sees
    return 0.25 * short, 0.95 * short, 1, 3


def _hidden(box: np.ndarray, earlier: list[np.ndarray]) -> bool:
    for e in earlier:
        iw = min(box[2], e[2]) - max(box[0], e[0])
        ih = min(box[3], e[3]) - max(box[1], e[1])
        if iw > 0 and ih > 0 and iw * ih > MAX_HIDDEN * (e[2] - e[0]) * (e[3] - e[1]):
            return True
    return False


def _paint(rng: np.random.Generator, img: np.ndarray, polys: list[np.ndarray], lw: int) -> bool:
    """Blend one object (filled: lw 0) into img through an anti-aliased mask; False if nothing is visible.

    A third of the objects are drawn with whole-pixel vertices (as most drawing code does), the rest with
    sub-pixel ones: small shapes look different either way, and both kinds are met in practice."""
    shift = 0 if rng.random() < 0.33 else _SHIFT
    h, w = img.shape[:2]
    allp = np.concatenate(polys)
    x0, y0 = np.floor(allp.min(0) - lw).astype(int) - 1
    x1, y1 = np.ceil(allp.max(0) + lw).astype(int) + 1
    cx0, cy0, cx1, cy1 = max(x0, 0), max(y0, 0), min(x1, w), min(y1, h)
    if cx1 - cx0 < 2 or cy1 - cy0 < 2:
        return False
    mask = np.zeros((y1 - y0, x1 - x0), np.uint8)
    fp = [np.round((p - [x0 + 0.5, y0 + 0.5]) * (1 << shift)).astype(np.int32) for p in polys]
    if lw:
        cv2.polylines(mask, fp, True, 255, lw, cv2.LINE_AA, shift)
    else:
        cv2.fillPoly(mask, fp[:1], 255, cv2.LINE_AA, shift)
        if len(fp) > 1:
            cv2.fillPoly(mask, fp[1:], 0, cv2.LINE_AA, shift)
    alpha = mask[cy0 - y0:cy1 - y0, cx0 - x0:cx1 - x0].astype(np.float32)[..., None] / 255.0
    if float(alpha.sum()) < 20:
        return False
    region = img[cy0:cy1, cx0:cx1]
    fill = np.empty(region.shape, np.float32)
    fill[:] = _colour(rng, region.reshape(-1, 3).mean(0))
    if not lw and rng.random() < 0.4:  # shading across the object
        th = rng.uniform(0, 2 * math.pi)
        yy, xx = np.mgrid[-1:1:complex(0, region.shape[0]), -1:1:complex(0, region.shape[1])]
        fill += ((xx * math.cos(th) + yy * math.sin(th)) * rng.uniform(10, 50))[..., None].astype(np.float32)
    region[:] = np.clip(region * (1 - alpha) + fill * alpha, 0, 255).astype(np.uint8)
    return True


def _camera(rng: np.random.Generator, img: np.ndarray) -> np.ndarray:
    if rng.random() < 0.3:
        if rng.random() < 0.5:
            img = cv2.GaussianBlur(img, (0, 0), rng.uniform(0.5, 1.6))
        else:  # motion blur along a random direction
            k = int(rng.integers(3, 8))
            ker = np.zeros((k, k), np.float32)
            cv2.line(ker, (0, int(rng.integers(0, k))), (k - 1, int(rng.integers(0, k))), 1.0)
            img = cv2.filter2D(img, -1, ker / max(float(ker.sum()), 1.0))
    gain = rng.uniform(0.6, 1.4) * rng.uniform(0.85, 1.15, 3)  # exposure x white balance
    gamma = rng.uniform(0.7, 1.4)
    x = np.arange(256, dtype=np.float32) / 255.0
    luts = [np.clip(255.0 * (x ** gamma) * g, 0, 255).astype(np.uint8) for g in gain]
    img = cv2.merge([cv2.LUT(np.ascontiguousarray(img[..., c]), luts[c]) for c in range(3)])
    if rng.random() < 0.5:
        noise = rng.normal(0.0, rng.uniform(2, 12), (*img.shape[:2], 1)).astype(np.float32)
        img = np.clip(img + noise, 0, 255).astype(np.uint8)
    if rng.random() < 0.4:
        ok, enc = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, int(rng.integers(25, 92))])
        decoded = cv2.imdecode(enc, cv2.IMREAD_COLOR) if ok else None
        img = img if decoded is None else decoded
    return np.ascontiguousarray(img)


def broad_scene(seed: int) -> Scene:
    """One broad training scene (frame size drawn from FRAME_SIZES), deterministic by seed."""
    rng = np.random.default_rng(seed)
    w, h = FRAME_SIZES[int(rng.integers(0, len(FRAME_SIZES)))]
    img = _background(rng, h, w)
    if rng.random() < 0.4:
        _clutter(rng, img)
    lo, hi, n_lo, n_hi = _size_regime(rng, min(w, h))
    boxes: list[np.ndarray] = []
    ids: list[int] = []
    n = int(rng.integers(n_lo, n_hi + 1))
    for _ in range(4 * n):
        if len(boxes) >= n:
            break
        cls = int(rng.integers(0, len(CLASS_NAMES)))
        side = float(rng.uniform(lo, hi)) if n_lo == 1 else math.exp(rng.uniform(math.log(lo), math.log(hi)))
        aspect = math.exp(rng.uniform(-0.25, 0.25))
        th = rng.uniform(0, 2 * math.pi)
        rot = np.array([[math.cos(th), -math.sin(th)], [math.sin(th), math.cos(th)]])
        stretch = [math.sqrt(aspect), 1 / math.sqrt(aspect)]
        unit = [p * stretch @ rot.T for p in _unit_polygons(rng, CLASS_NAMES[cls])]
        half = float(np.abs(unit[0]).max())
        outlined = rng.random() < 0.45
        # a line at most a tenth of the side: a thicker outline is another class's drawing (an outlined
        # circle with a band a fifth of its radius or more is a ring; a small outlined hexagon, a blob)
        lw = min(int(rng.integers(1, 10)), max(1, round(side / OUTLINE_SHARE))) if outlined else 0
        scale = side / (2 * half)
        # centres that leave at most ~30 % of the object outside: a large object fits the frame too
        cx, cy = (rng.uniform(min(0.2 * side, n / 2), max(n - 0.2 * side, n / 2)) for n in (w, h))
        polys = [p * scale + [cx, cy] for p in unit]
        ext = np.concatenate([polys[0].min(0) - lw / 2, polys[0].max(0) + lw / 2])
        box = np.clip(ext, 0, [w, h, w, h])
        area = float((ext[2] - ext[0]) * (ext[3] - ext[1]))
        if (box[2] - box[0]) * (box[3] - box[1]) < MIN_INSIDE * area or _hidden(box, boxes):
            continue
        if _paint(rng, img, polys, lw):
            boxes.append(box)
            ids.append(cls)
    img = _camera(rng, img)
    return Scene(image=img, boxes=np.array(boxes, np.float32).reshape(-1, 4),
                 class_ids=np.array(ids, np.int64))
