"""The training data feed of tools/train_detector.py: synthetic scenes at the deployed scale, zoomed, cropped
to training windows, mirrored replays, batches. Kept apart from the loop and the export.

The recipe lives in module globals (defaults below) that train_detector.main() sets once from its command
line before anything is drawn; nothing here changes them.
"""

from __future__ import annotations

import cv2
import numpy as np
import torch
from train_scenes import broad_scene

from dla_infer_node.core.synth import generate_scene

Cropped = tuple[np.ndarray, np.ndarray, np.ndarray]  # window, targets, ignore regions (random_crop)

TRAIN_SEED_LIMIT = 1_000_000
INPUT_W, INPUT_H = 640, 512  # deployed network input; --input changes it (module globals, set once in main)
CROP_W, CROP_H = 320, 256    # training crop (--crop): what one step sees
ZOOM = (0.5, 1.05)           # training scenes are letterboxed at the deployed scale times U[ZOOM] (--zoom)
CROP_KEEP = 0.6              # a box cut by a crop stays labelled with at least this share of its area inside
BIG_EVERY = 2                # every N-th batch: BIG_BATCH windows of BIG_CROP (large objects fit); 0: off
BIG_CROP = (640, 512)
BIG_BATCH = 2
# zoom range of the new scenes of a big batch (--big-zoom); None: ZOOM. Near 1 the whole windows show large
# objects at the size they have at run time, where ZOOM's low end halves them
BIG_ZOOM: tuple[float, float] | None = None
CROP_ON_OBJECT = 0.0         # share of crops centred (with jitter) on a random object (tried: not better)
# Objects cut below CROP_KEEP are unlabelled yet visible in the window; without IGNORE_CUT their cells are
# trained as background, which teaches the network to suppress large objects (they are the ones most often
# cut). IGNORE_CUT leaves the objectness of those cells out of the loss instead (--ignore-cut).
IGNORE_CUT = True
NO_IGNORE = np.zeros((0, 6), np.float32)
PAD_VALUE = 114
TRAIN_OBJECTS = (5, 16)  # object-count range of training scenes drawn by core.synth
# share of training scenes drawn by train_scenes.broad_scene (sizes up to 95 % of the frame, outlines,
# backgrounds and camera effects core.synth does not vary); the rest are core.synth's (--broad)
BROAD_SHARE = 0.6
# scene sizes drawn during training (mostly the default 640x480; a few others so letterboxing varies)
SIZES = [(640, 480)] * 6 + [(480, 480), (640, 360), (720, 540), (400, 300)]


def letterbox(img: np.ndarray, dst_w: int, dst_h: int) -> tuple[np.ndarray, float, int, int]:
    """The package's letterbox convention (shared brief): returns canvas, scale, pad_x, pad_y."""
    h, w = img.shape[:2]
    scale = min(dst_w / w, dst_h / h)
    nw, nh = max(round(w * scale), 1), max(round(h * scale), 1)
    px, py = (dst_w - nw) // 2, (dst_h - nh) // 2
    canvas = np.full((dst_h, dst_w, 3), PAD_VALUE, np.uint8)
    canvas[py:py + nh, px:px + nw] = cv2.resize(img, (nw, nh), interpolation=cv2.INTER_LINEAR)
    return canvas, scale, px, py


def make_sample_u8(seed: int, train: bool = True,
                   zoom_range: tuple[float, float] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """One scene -> (H,W,3) uint8 RGB canvas, targets (N,5) [cls, cx, cy, w, h] in canvas px.

    ``train=False``: the deployed letterbox (canvas = network input). ``train=True``: the letterbox at the
    deployed scale times a zoom drawn from ``zoom_range`` (default ``ZOOM``; seeded by the scene: the same
    draw whatever the range); :func:`random_crop` then takes the training window from it (padding a canvas
    smaller than the window).
    """
    size_rng = np.random.default_rng(seed + 7_777_777)
    w, h = SIZES[int(size_rng.integers(0, len(SIZES)))]
    zoom = float(size_rng.uniform(*(zoom_range or ZOOM))) if train else 1.0
    if size_rng.random() < BROAD_SHARE:
        s = broad_scene(seed)
    else:  # denser than the default scenes: more supervised objects per unit of (scarce) CPU time
        s = generate_scene(seed, w, h, min_objects=TRAIN_OBJECTS[0], max_objects=TRAIN_OBJECTS[1])
    canvas, scale, px, py = letterbox(s.image, max(1, round(INPUT_W * zoom)), max(1, round(INPUT_H * zoom)))
    b = s.boxes * scale + np.array([px, py, px, py], np.float32)
    t = np.stack([s.class_ids.astype(np.float32), (b[:, 0] + b[:, 2]) / 2, (b[:, 1] + b[:, 3]) / 2,
                  b[:, 2] - b[:, 0], b[:, 3] - b[:, 1]], 1) if len(b) else np.zeros((0, 5), np.float32)
    return canvas, t.astype(np.float32)


def make_sample(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """One scene at the deployed letterbox -> (3,H,W) float32 in [0,1] RGB, targets (N,5) in input px."""
    canvas, t = make_sample_u8(seed, train=False)
    return canvas.transpose(2, 0, 1).astype(np.float32) / 255.0, t


def box_wh(scene_seeds: range) -> np.ndarray:
    """(N, 2) w/h in input pixels of every box of the training scenes with these seeds (the anchor fits)."""
    return np.concatenate([make_sample_u8(s)[1][:, 3:5] for s in scene_seeds])


def kmeans_anchors(seed: int, n_scenes: int = 300, k: int = 9) -> np.ndarray:
    """k-means (1 - IoU distance) on the w/h of training-scene boxes in input pixels; sorted by area."""
    wh = box_wh(range(seed * 131, seed * 131 + n_scenes))
    rng = np.random.default_rng(seed)
    centers = wh[rng.choice(len(wh), k, replace=False)]

    def iou(a: np.ndarray, c: np.ndarray) -> np.ndarray:
        inter = np.minimum(a[:, None, 0], c[None, :, 0]) * np.minimum(a[:, None, 1], c[None, :, 1])
        return inter / (a[:, None].prod(2) + c[None].prod(2) - inter)

    for _ in range(100):
        assign = iou(wh, centers).argmax(1)
        new = np.array([np.median(wh[assign == j], 0) if np.any(assign == j) else centers[j]
                        for j in range(k)])
        if np.allclose(new, centers):
            break
        centers = new
    return centers[np.argsort(centers.prod(1))]


def log_grid_anchors(k: int = 9, n_scenes: int = 300) -> np.ndarray:
    """k square anchors, sides log-spaced from the 1st to the 99.5th percentile of the box side (sqrt(w*h))
    over a fixed set of training scenes, so every --seed gets the same ones; sorted by area.

    Why not k-means: it follows the box count, dense at small sizes, and from its one random start the split
    of the sparse large end differs per seed (12 anchors: seed 5 put three above 140 px, seeds 6 and 7 two,
    with the largest at 287 vs 225 px), and seed 5 scored best on held-out large objects. Even steps in log
    size give every part of the size range about the same anchor IoU. Square, because objects turn through
    every angle (k-means anchors stay within 7 % of square).
    """
    wh = box_wh(range(n_scenes))
    lo, hi = np.percentile(np.sqrt(wh.prod(1)), [1.0, 99.5])
    side = np.exp(np.linspace(np.log(lo), np.log(hi), k))
    return np.stack([side, side], 1)


def collate(samples: list[Cropped]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """uint8 HWC canvases + per-image targets and ignore regions -> NCHW float batch (channels-last memory),
    (M, 6) targets [image, cls, cx, cy, w, h], (K, 7) ignore regions [image, x0, y0, x1, y1, w, h]."""
    imgs = np.stack([im for im, _, _ in samples])                  # (B, H, W, 3) uint8
    x = torch.from_numpy(imgs).permute(0, 3, 1, 2).float().div_(255.0)  # NHWC memory, NCHW shape

    def indexed(k: int) -> torch.Tensor:  # field k of every sample, each row prefixed by its image index
        rows = [np.concatenate([np.full((len(s[k]), 1), i, np.float32), s[k]], 1)
                for i, s in enumerate(samples)]
        return torch.from_numpy(np.concatenate(rows))

    return x.contiguous(memory_format=torch.channels_last), indexed(1), indexed(2)


def flipped(sample: tuple[np.ndarray, np.ndarray], code: int) -> tuple[np.ndarray, np.ndarray]:
    """Mirror a canvas horizontally (code & 1) and/or vertically (code & 2), boxes exactly with it.

    Exact for this data: every class is its own mirror image as a category, shading and rotation are
    symmetric in distribution, and the letterbox pads are centred, so they stay where they were.
    """
    im, t = sample
    t = t.copy()
    if code & 1:
        im = im[:, ::-1]
        t[:, 1] = im.shape[1] - t[:, 1]
    if code & 2:
        im = im[::-1]
        t[:, 2] = im.shape[0] - t[:, 2]
    return im, t


def random_crop(sample: tuple[np.ndarray, np.ndarray], rng: np.random.Generator,
                size: tuple[int, int] | None = None) -> Cropped:
    """A CROP_W x CROP_H window of a (zoomed) canvas; boxes clipped to it, kept with >= CROP_KEEP inside.

    Returns (window, targets (N, 5) [cls, cx, cy, w, h], ignore regions (K, 6) [x0, y0, x1, y1, w, h]): with
    IGNORE_CUT, each object cut below CROP_KEEP but still partly inside gives its visible part (xyxy in the
    window) and its whole size, where the loss then asks no objectness either way (see train_loss).

    Why crops: the deployed input is larger than what a CPU step can afford, so each step sees part of a
    scene at (about) the deployed scale instead of the whole scene shrunk, and small objects keep their
    pixels. A box cut below CROP_KEEP is dropped, as the scene generator never leaves an object less than
    that share inside the image either.
    """
    im, t = sample
    cw, ch = size or (CROP_W, CROP_H)
    h, w = im.shape[:2]
    if w < cw or h < ch:  # a window larger than this canvas: centre the canvas on a padded one
        big = np.full((max(h, ch), max(w, cw), 3), PAD_VALUE, np.uint8)
        ox, oy = (big.shape[1] - w) // 2, (big.shape[0] - h) // 2
        big[oy:oy + h, ox:ox + w] = im
        im, t = big, t + np.array([0, ox, oy, 0, 0], np.float32)
        h, w = im.shape[:2]
    if (w, h) == (cw, ch):
        return im, t, NO_IGNORE
    if CROP_ON_OBJECT > 0 and len(t) and rng.random() < CROP_ON_OBJECT:
        # centred on an object (+- a quarter crop): large objects at high zoom then often fit whole, where
        # uniform windows mostly cut them below CROP_KEEP and they went unsupervised
        cx, cy = t[int(rng.integers(0, len(t))), 1:3] + rng.uniform(-0.25, 0.25, 2) * [cw, ch]
        x0 = int(np.clip(round(cx - cw / 2), 0, w - cw))
        y0 = int(np.clip(round(cy - ch / 2), 0, h - ch))
    else:
        x0, y0 = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
    xy = np.concatenate([t[:, 1:3] - t[:, 3:5] / 2, t[:, 1:3] + t[:, 3:5] / 2], 1) - [x0, y0, x0, y0]
    cut = np.clip(xy, 0, [cw, ch, cw, ch])
    inside = np.prod(cut[:, 2:] - cut[:, :2], 1) / np.maximum(np.prod(t[:, 3:5], 1), 1e-6)
    keep = inside >= CROP_KEEP
    ignore = NO_IGNORE
    if IGNORE_CUT:
        part = ~keep & (inside > 0)
        ignore = np.concatenate([cut[part], t[part, 3:5]], 1).astype(np.float32)
    cut = cut[keep]
    t = np.concatenate([t[keep, :1], (cut[:, :2] + cut[:, 2:]) / 2, cut[:, 2:] - cut[:, :2]], 1)
    return np.ascontiguousarray(im[y0:y0 + ch, x0:x0 + cw]), t.astype(np.float32), ignore


class ReplayFeed:
    """Each batch = ``fresh`` new scenes + replays of earlier ones (random mirror), all seeded.

    Drawing a scene costs about as much CPU as a training step on it; replaying recent scenes (mirrored, so
    a replay is rarely pixel-identical) lets a fixed CPU budget buy about twice the optimiser steps while
    every scene is still used only a few times. The ring keeps the newest ``capacity`` scenes as uint8.
    """

    def __init__(self, first_seed: int, batch_size: int, fresh: int, capacity: int, rng_seed: int) -> None:
        if not 1 <= fresh <= batch_size:
            raise ValueError(f"fresh must be in [1, {batch_size}], got {fresh}")
        self.next_seed, self.batch_size, self.fresh, self.capacity = first_seed, batch_size, fresh, capacity
        self.first_seed = first_seed
        self.ring: list[tuple[np.ndarray, np.ndarray]] = []
        self.write = 0  # next ring slot to overwrite once the ring is full (oldest first)
        self.rng = np.random.default_rng(rng_seed)
        self.batches = 0

    @property
    def scenes_drawn(self) -> int:
        return self.next_seed - self.first_seed

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        self.batches += 1
        big = BIG_EVERY > 0 and self.batches % BIG_EVERY == 0
        size, batch_size = (BIG_CROP, BIG_BATCH) if big else ((CROP_W, CROP_H), self.batch_size)
        zoom, seeds = (BIG_ZOOM if big else None), range(self.next_seed, self.next_seed + self.fresh)
        new = [make_sample_u8(sd, zoom_range=zoom) for sd in seeds]
        self.next_seed += self.fresh
        n_replay = max(batch_size - self.fresh, 0) if self.ring else 0
        none = np.zeros(0, np.int64)
        picks = self.rng.integers(0, len(self.ring), n_replay) if n_replay else none
        codes = self.rng.integers(1, 4, n_replay) if n_replay else none  # 1, 2, 3: never the original
        old = [flipped(self.ring[int(i)], int(c)) for i, c in zip(picks, codes, strict=True)]
        for s in new:
            if len(self.ring) < self.capacity:
                self.ring.append(s)
            else:
                self.ring[self.write] = s
                self.write = (self.write + 1) % self.capacity
        samples = new + old
        if len(samples) < batch_size:  # first batch: nothing to replay yet, so add mirrors of the
            # new scenes (at most `fresh` of them: that batch may be smaller than batch_size)
            samples += [flipped(s, 1) for s in new][: batch_size - len(samples)]
        return collate([random_crop(s, self.rng, size) for s in samples])
