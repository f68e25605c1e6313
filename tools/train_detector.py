"""Train the shapes detector on synthetic scenes (PyTorch, CPU) and export it for the package.

    /work/trainvenv/bin/python tools/train_detector.py --out models/

Deterministic by --seed: scene seeds, weight init and batch order all derive from it. Training scenes use
seeds in [0, TRAIN_SEED_LIMIT); evaluation (dla_infer_node.evaluate) uses seeds >= 10_000_000, so the
held-out scenes are never seen here. Each batch draws --fresh new scenes and fills the rest with mirrored
replays of recent ones (ReplayFeed), so each scene is used about batch/fresh times.

The deployed input (--input, 640x512) is larger than a CPU step can afford, so a step trains on --crop
windows (320x256) of scenes letterboxed at the deployed scale times a random zoom (--zoom): objects keep the
pixels they will have at run time (what small objects need), and the zoom range spans the object sizes the
deployed input sees. The exported network is the same convolutional graph at the deployed input size.

Outputs: <out>/shapes_yolo.onnx (BN folded, raw heads), shapes_yolo.labels.txt, shapes_yolo.meta.yaml and
shapes_yolo.check.npz (torch outputs for fixed inputs; tools/verify_onnx.py compares ONNX Runtime to them).
"""

from __future__ import annotations

import argparse
import copy
import math
import subprocess
import sys
import time
from pathlib import Path

import cv2
import numpy as np
import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from shapes_model import ShapesYolo, export_onnx, fold_batchnorm  # noqa: E402
from train_loss import YoloLoss  # noqa: E402

from dla_infer_node.synth import CLASS_NAMES, generate_scene  # noqa: E402

Cropped = tuple[np.ndarray, np.ndarray, np.ndarray]  # window, targets, ignore regions (random_crop)

TRAIN_SEED_LIMIT = 1_000_000
INPUT_W, INPUT_H = 640, 512  # deployed network input; --input changes it (module globals, set once in main)
CROP_W, CROP_H = 320, 256    # training crop (--crop): what one step sees
ZOOM = (0.5, 1.05)           # training scenes are letterboxed at the deployed scale times U[ZOOM] (--zoom)
CROP_KEEP = 0.6              # a box cut by a crop stays labelled with at least this share of its area inside
BIG_EVERY = 0                # every N-th batch: BIG_BATCH windows of BIG_CROP (large objects fit); 0: off
BIG_CROP = (480, 384)
BIG_BATCH = 4
CROP_ON_OBJECT = 0.0         # share of crops centred (with jitter) on a random object (tried: not better)
# Objects cut below CROP_KEEP are unlabelled yet visible in the window; without IGNORE_CUT their cells are
# trained as background, which teaches the network to suppress large objects (they are the ones most often
# cut). IGNORE_CUT leaves the objectness of those cells out of the loss instead (--ignore-cut).
IGNORE_CUT = True
NO_IGNORE = np.zeros((0, 6), np.float32)
PAD_VALUE = 114
TRAIN_OBJECTS = (5, 16)  # object-count range of training scenes
PLAN_CHECK_AT = 300     # iteration at which a too-slow machine shortens the plan (once)
PLAN_BUDGET_SHARE = 0.97  # share of --time-budget the shortened plan aims at (export follows)
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


def make_sample_u8(seed: int, train: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """One scene -> (H,W,3) uint8 RGB canvas, targets (N,5) [cls, cx, cy, w, h] in canvas px.

    ``train=False``: the deployed letterbox (canvas = network input). ``train=True``: the letterbox at the
    deployed scale times a zoom drawn from ``ZOOM`` (seeded by the scene); :func:`random_crop` then takes
    the training window from it (padding a canvas smaller than the window).
    """
    size_rng = np.random.default_rng(seed + 7_777_777)
    w, h = SIZES[int(size_rng.integers(0, len(SIZES)))]
    zoom = float(size_rng.uniform(*ZOOM)) if train else 1.0
    # denser than the default scenes: more supervised objects per unit of (scarce) CPU time
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


def kmeans_anchors(seed: int, n_scenes: int = 300, k: int = 9) -> np.ndarray:
    """k-means (1 - IoU distance) on the w/h of training-scene boxes in input pixels; sorted by area."""
    wh = np.concatenate([make_sample_u8(seed * 131 + i)[1][:, 3:5] for i in range(n_scenes)])
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
        new = [make_sample_u8(sd) for sd in range(self.next_seed, self.next_seed + self.fresh)]
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


def git_revision() -> str:
    try:
        return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main() -> None:
    global INPUT_W, INPUT_H, CROP_W, CROP_H, ZOOM, CROP_ON_OBJECT, BIG_EVERY, BIG_CROP, BIG_BATCH, IGNORE_CUT
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--iters", type=int, default=11800)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--fresh", type=int, default=2,
                    help="new scenes per batch; the rest of the batch replays mirrored recent scenes")
    ap.add_argument("--replay-capacity", type=int, default=12000, help="scenes kept for replay (uint8)")
    ap.add_argument("--input", default="640x512", help="deployed network input WxH (multiples of 8 x --stem)")
    ap.add_argument("--crop", default="320x256",
                    help="training crop WxH (multiples of 8 x --stem); equal to --input with --zoom 1,1 "
                         "trains on whole letterboxed scenes")
    ap.add_argument("--big-every", type=int, default=BIG_EVERY,
                    help="every N-th batch holds --big-batch windows of --big-crop instead (0: never)")
    ap.add_argument("--big-crop", default="480x384")
    ap.add_argument("--big-batch", type=int, default=BIG_BATCH)
    ap.add_argument("--crop-on-object", type=float, default=CROP_ON_OBJECT,
                    help="share of training crops centred on a random object (the rest are uniform)")
    ap.add_argument("--ignore-cut", action=argparse.BooleanOptionalAction, default=True,
                    help="objects a window cuts below the kept share neither count as objects nor as "
                         "background in the objectness loss (--no-ignore-cut: background, as before)")
    ap.add_argument("--zoom", default="0.5,1.05",
                    help="LO,HI: training scenes are letterboxed at the deployed scale times U[LO, HI]")
    ap.add_argument("--stem", type=int, default=4, help="patchify stem kernel = stride (heads at 2/4/8 x it)")
    ap.add_argument("--stem-channels", type=int, default=32)
    ap.add_argument("--width", type=float, default=1.25, help="channel multiplier after the stem")
    ap.add_argument("--box-weight", type=float, default=0.1,
                    help="weight of the CIoU box loss (objectness 0.7, classes 0.3)")
    ap.add_argument("--small-ref", type=float, default=32.0,
                    help="weight box/class loss of objects under this many input px by ref/size (0: off)")
    ap.add_argument("--p2", action="store_true", help="add a fourth head at stride = stem (small objects)")
    ap.add_argument("--time-budget", type=float, default=1680.0,
                    help="wall seconds; a machine too slow for --iters shortens the plan once, at "
                         "iteration 300, to end inside it (recorded in meta); also a hard stop")
    ap.add_argument("--stop-at", type=int, default=None,
                    help="end at this iteration with the LR schedule still planned for --iters: reproduces "
                         "a run the time budget stopped (its metadata records both numbers)")
    ap.add_argument("--lr", type=float, default=2.5e-3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--precision", choices=("bf16", "fp32"), default="bf16",
                    help="forward/backward under bfloat16 autocast (weights, loss and EMA stay float32); "
                         "0.07 s instead of 0.11 s per step on an AVX512-BF16 CPU; fp32 on one without")
    ap.add_argument("--out", type=Path, default=ROOT / "models")
    ap.add_argument("--ckpt", type=Path, default=None, help="checkpoint file (saved every 200 iters)")
    ap.add_argument("--resume", action="store_true")
    args = ap.parse_args()
    CROP_ON_OBJECT = args.crop_on_object
    IGNORE_CUT = args.ignore_cut
    BIG_EVERY, BIG_BATCH = args.big_every, args.big_batch
    bw, bh = (int(v) for v in args.big_crop.lower().split("x"))
    BIG_CROP = (bw, bh)
    INPUT_W, INPUT_H = (int(v) for v in args.input.lower().split("x"))
    CROP_W, CROP_H = (int(v) for v in args.crop.lower().split("x"))
    lo, hi = (float(v) for v in args.zoom.split(","))
    ZOOM = (lo, hi)
    for name, (w, h) in (("--input", (INPUT_W, INPUT_H)), ("--crop", (CROP_W, CROP_H))):
        if w % (8 * args.stem) or h % (8 * args.stem):
            ap.error(f"{name} {w}x{h}: both sides must be multiples of {8 * args.stem}")
    if not 0 < lo <= hi:
        ap.error(f"--zoom {args.zoom}: need 0 < LO <= HI")

    revision = git_revision()  # the code that trains, not whatever HEAD is when the run ends
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True, warn_only=True)
    t_start = time.time()
    levels = 4 if args.p2 else 3
    anchors_np = kmeans_anchors(args.seed, k=3 * levels).reshape(levels, 3, 2)
    print("anchors (input px):", np.round(anchors_np, 1).tolist(), flush=True)
    anchors = torch.from_numpy(anchors_np.astype(np.float32))
    nc = len(CLASS_NAMES)
    model = ShapesYolo(nc, stem=args.stem, stem_channels=args.stem_channels, p2=args.p2,
                       width=args.width)
    model.init_head_bias((CROP_H, CROP_W))
    # channels-last activations: oneDNN's convolutions run ~25 % faster per sample on this CPU
    model = model.to(memory_format=torch.channels_last)
    ema = copy.deepcopy(model).eval()
    for q in ema.parameters():
        q.requires_grad_(False)
    decay_p = [q for n, q in model.named_parameters() if q.ndim > 1]
    other_p = [q for n, q in model.named_parameters() if q.ndim <= 1]
    groups = [{"params": decay_p, "weight_decay": 5e-4}, {"params": other_p, "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.999))
    crit = YoloLoss(anchors, model.strides, nc, w_box=args.box_weight, small_ref=args.small_ref)
    warm = min(100, args.iters // 10)
    stopped_at = None
    start_it = 0
    first_seed = args.seed * TRAIN_SEED_LIMIT // 10
    feed = ReplayFeed(first_seed, args.batch, args.fresh, args.replay_capacity, rng_seed=args.seed + 1)
    ckpt = args.ckpt or args.out / "train_ckpt.pt"
    plan = args.iters  # may be shortened once (below) or restored from a checkpoint
    if args.resume and ckpt.is_file():
        st = torch.load(ckpt, weights_only=False)
        model.load_state_dict(st["model"]); ema.load_state_dict(st["ema"])  # noqa: E702
        opt.load_state_dict(st["opt"]); start_it = st["it"]; t_start -= st["elapsed"]  # noqa: E702
        plan = st.get("plan", plan)
        # the replay ring is not saved: a resumed run continues the scene seeds with an empty ring
        feed.next_seed = st["next_seed"]; feed.rng.bit_generator.state = st["feed_rng"]  # noqa: E702
        print(f"resumed at iter {start_it}", flush=True)
    model.train()
    # The LR schedule is a function of the iteration only, so a run is reproducible from its seed and its
    # iteration count. If the machine is too slow for the planned iterations, the plan is shortened ONCE,
    # at iteration PLAN_CHECK_AT, from the measured speed (printed and recorded as `iterations`; passing
    # that number as --iters reproduces the run anywhere). The budget check below is only a safety stop.
    it = start_it
    while it < plan:
        el = time.time() - t_start
        if el > args.time_budget or it == args.stop_at:
            stopped_at = it
            why = "--stop-at" if it == args.stop_at else "time budget"
            print(f"{why} reached at iteration {it}", flush=True)
            break
        if it == PLAN_CHECK_AT and start_it < it:
            per_it = el / it  # includes the anchor k-means and the first batches: errs on the safe side
            fits = int(it + (PLAN_BUDGET_SHARE * args.time_budget - el) / per_it)
            if fits < plan:
                plan = max(fits, it + 1)
                print(f"{per_it:.3f} s per iteration: plan shortened to {plan} iterations", flush=True)
        prog = (it - warm) / max(plan - warm, 1)
        lr = args.lr * (it + 1) / warm if it < warm else \
            args.lr * (0.02 + 0.98 * 0.5 * (1 + math.cos(math.pi * min(prog, 1.0))))
        for g in opt.param_groups:
            g["lr"] = lr
        imgs, tg, ign = feed.next_batch()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16"):
            outs = model(imgs)
        loss, parts = crit(tuple(o.float() for o in outs), tg, ign)  # the loss (CIoU, BCE) in float32
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
        opt.step()
        d = 0.999 * (1 - math.exp(-(it + 1) / 200))  # EMA ramp (YOLOv5-style, shorter run)
        with torch.no_grad():
            msd = model.state_dict()
            for k, v in ema.state_dict().items():
                if v.dtype.is_floating_point:
                    v.mul_(d).add_(msd[k].detach(), alpha=1 - d)
                else:
                    v.copy_(msd[k])
        if it % 20 == 0 or it == plan - 1:
            el = time.time() - t_start
            print(f"it {it} lr {lr:.5f} loss {float(loss):.3f} box {parts[0]:.4f} obj {parts[1]:.4f} "
                  f"cls {parts[2]:.4f} elapsed {el:.0f}s", flush=True)
        if (it + 1) % 200 == 0:
            torch.save({"model": model.state_dict(), "ema": ema.state_dict(), "opt": opt.state_dict(),
                        "it": it + 1, "plan": plan, "elapsed": time.time() - t_start, "anchors": anchors_np,
                        "next_seed": feed.next_seed, "feed_rng": feed.rng.bit_generator.state}, ckpt)
        it += 1
    wall = time.time() - t_start
    print(f"training wall time {wall:.0f}s", flush=True)
    export(ema, anchors_np, args, wall, feed.scenes_drawn, revision, plan, stopped_at)


def export(ema: torch.nn.Module, anchors: np.ndarray, args: argparse.Namespace, wall: float,
           scenes: int, revision: str, plan: int, stopped_at: int | None = None) -> None:
    args.out.mkdir(parents=True, exist_ok=True)
    net = fold_batchnorm(copy.deepcopy(ema).to(memory_format=torch.contiguous_format)).eval()
    onnx_path = args.out / "shapes_yolo.onnx"
    names = [f"head_s{s}" for s in net.strides]
    export_onnx(net, str(onnx_path), (INPUT_H, INPUT_W), names)
    # reference outputs for the ONNX Runtime check (tools/verify_onnx.py): folded and unfolded nets agree
    rng = np.random.default_rng(args.seed)
    x = np.stack([make_sample(TRAIN_SEED_LIMIT - 1 - i)[0] for i in range(2)] +
                 [rng.uniform(0, 1, (3, INPUT_H, INPUT_W)).astype(np.float32)])
    with torch.no_grad():
        ref = [ [t.numpy() for t in net(torch.from_numpy(x[i:i + 1]))] for i in range(len(x))]
        unfolded = [t.numpy() for t in ema.eval()(torch.from_numpy(x[:1]))]
    fold_err = max(float(np.abs(a - b).max()) for a, b in zip(ref[0], unfolded, strict=True))
    print(f"BN fold max abs diff {fold_err:.2e}", flush=True)
    np.savez(args.out / "shapes_yolo.check.npz", x=x,
             **{f"out{i}_{j}": ref[i][j] for i in range(len(x)) for j in range(len(ref[i]))})
    (args.out / "shapes_yolo.labels.txt").write_text("\n".join(CLASS_NAMES) + "\n", encoding="utf-8")
    no = len(anchors[0]) * (5 + len(CLASS_NAMES))
    iters = plan if stopped_at is None else stopped_at
    meta = {
        "name": "shapes_yolo",
        "onnx": "shapes_yolo.onnx",
        "labels": "shapes_yolo.labels.txt",
        "input": {"name": "images", "width": INPUT_W, "height": INPUT_H, "channel_order": "rgb",
                  "mean": [0.0, 0.0, 0.0], "std": [255.0, 255.0, 255.0], "pad_value": PAD_VALUE},
        "decoder": {"kind": "yolov5_raw", "num_classes": len(CLASS_NAMES),
                    "strides": list(net.strides),
                    "anchors": [[round(float(v), 2) for v in a.reshape(-1)] for a in anchors]},
        "outputs": [{"name": n, "shape": [1, no, INPUT_H // s, INPUT_W // s]}
                    for n, s in zip(names, net.strides, strict=True)],
        "classes": list(CLASS_NAMES),
        "training": {"seed": args.seed, "revision": revision, "iterations": iters,
                     # the plan the LR schedule followed (--iters, unless shortened at PLAN_CHECK_AT)
                     "planned_iterations": plan, "requested_iterations": args.iters,
                     "time_bound": stopped_at is not None and stopped_at != args.stop_at,
                     "stem": args.stem, "stem_channels": args.stem_channels, "p2": args.p2,
                     "width": args.width, "box_weight": args.box_weight,
                     "small_ref": args.small_ref, "crop": [CROP_W, CROP_H], "zoom": list(ZOOM),
                     "crop_on_object": CROP_ON_OBJECT, "ignore_cut": IGNORE_CUT,
                     "big_every": BIG_EVERY, "big_crop": list(BIG_CROP), "big_batch": BIG_BATCH,
                     "batch": args.batch, "fresh_per_batch": args.fresh, "precision": args.precision,
                     "replay_capacity": args.replay_capacity, "scenes": scenes,
                     "train_seeds": f"[{args.seed * TRAIN_SEED_LIMIT // 10}, "
                                    f"{args.seed * TRAIN_SEED_LIMIT // 10 + scenes})",
                     "wall_time_s": round(wall, 1), "threads": args.threads, "torch": str(torch.__version__)},
        "accuracy": {"mAP50": None, "mAP50_95": None, "scenes": None, "seeds": None},
    }
    meta_path = args.out / "shapes_yolo.meta.yaml"
    meta_path.write_text(yaml.safe_dump(meta, sort_keys=False), encoding="utf-8")
    print(f"wrote {onnx_path} ({onnx_path.stat().st_size / 1e6:.2f} MB) and {meta_path}", flush=True)


if __name__ == "__main__":
    main()
