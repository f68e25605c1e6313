"""Train the shapes detector on synthetic scenes (PyTorch, CPU) and export it for the package.

    .trainvenv/bin/python tools/train_detector.py --out models/   # a venv with torch (models/README.md)

Deterministic by --seed: scene seeds, weight init and batch order all derive from it. Training scenes use
seeds in [0, TRAIN_SEED_LIMIT); evaluation (dla_infer_node.cli.evaluate) uses seeds >= 10_000_000, so the
held-out scenes are never seen here. Each batch draws --fresh new scenes and fills the rest with mirrored
replays of recent ones (train_data.ReplayFeed), so each scene is used about batch/fresh times.

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
import hashlib
import math
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

import train_data as data  # noqa: E402
from onnx_init import init_from_onnx  # noqa: E402
from shapes_model import ShapesYolo, export_onnx, fold_batchnorm  # noqa: E402
from train_loss import YoloLoss  # noqa: E402

from dla_infer_node.core.synth import CLASS_NAMES  # noqa: E402

PLAN_CHECK_AT = 300     # iteration at which a too-slow machine shortens the plan (once)
PLAN_SPEED_FROM = 100   # ... from the speed measured since this iteration
PLAN_BUDGET_SHARE = 0.97  # share of --time-budget the shortened plan aims at (export follows)


def git_revision() -> str:
    try:
        return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def native_bf16() -> bool:
    """Whether this CPU computes bfloat16 natively (Linux flags; elsewhere: assume not)."""
    try:
        flags = Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def zoom_range(text: str) -> tuple[float, float]:
    """argparse type of --zoom / --big-zoom: LO,HI with 0 < LO <= HI (argparse names the flag on error)."""
    try:
        lo, hi = (float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: need two numbers LO,HI") from None
    if not 0 < lo <= hi:
        raise argparse.ArgumentTypeError(f"{text!r}: need 0 < LO <= HI")
    return lo, hi


def size_wxh(text: str) -> tuple[int, int]:
    """argparse type of --input / --crop / --big-crop: WxH in pixels."""
    try:
        w, h = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: need WxH, two integers") from None
    return w, h


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--iters", type=int, default=30000)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--fresh", type=int, default=2,
                    help="new scenes per batch; the rest of the batch replays mirrored recent scenes")
    ap.add_argument("--replay-capacity", type=int, default=12000, help="scenes kept for replay (uint8)")
    ap.add_argument("--input", type=size_wxh, default="640x512",
                    help="deployed network input WxH (multiples of 8 x --stem)")
    ap.add_argument("--crop", type=size_wxh, default="320x256",
                    help="training crop WxH (multiples of 8 x --stem); equal to --input with --zoom 1,1 "
                         "trains on whole letterboxed scenes")
    ap.add_argument("--big-every", type=int, default=data.BIG_EVERY,
                    help="every N-th batch holds --big-batch windows of --big-crop instead (0: never)")
    ap.add_argument("--big-crop", type=size_wxh, default="x".join(str(v) for v in data.BIG_CROP))
    ap.add_argument("--big-batch", type=int, default=data.BIG_BATCH)
    ap.add_argument("--big-zoom", type=zoom_range, default=None,
                    help="LO,HI: zoom range of the new scenes of big batches (default: --zoom's)")
    ap.add_argument("--broad", type=float, default=data.BROAD_SHARE,
                    help="share of training scenes from train_scenes.broad_scene (the rest: core.synth)")
    ap.add_argument("--crop-on-object", type=float, default=data.CROP_ON_OBJECT,
                    help="share of training crops centred on a random object (the rest are uniform)")
    ap.add_argument("--ignore-cut", action=argparse.BooleanOptionalAction, default=data.IGNORE_CUT,
                    help="objects a window cuts below the kept share neither count as objects nor as "
                         "background in the objectness loss (--no-ignore-cut: background, as before)")
    ap.add_argument("--zoom", type=zoom_range, default="0.5,1.05",
                    help="LO,HI: training scenes are letterboxed at the deployed scale times U[LO, HI]")
    ap.add_argument("--stem", type=int, default=4, help="patchify stem kernel = stride (heads at 2/4/8 x it)")
    ap.add_argument("--stem-channels", type=int, default=32)
    ap.add_argument("--width", type=float, default=1.25, help="channel multiplier after the stem")
    ap.add_argument("--box-weight", type=float, default=0.1,
                    help="weight of the CIoU box loss (objectness 0.7, classes 0.3)")
    ap.add_argument("--small-ref", type=float, default=32.0,
                    help="weight box/class loss of objects under this many input px by ref/size (0: off)")
    ap.add_argument("--anchors", choices=("kmeans", "log-grid"), default="kmeans",
                    help="kmeans: k-means on this seed's scenes (the split of large sizes varies by seed); "
                         "log-grid: square anchors log-spaced over the training box sizes, the same for "
                         "every seed (ignored with --init, which brings its anchors)")
    ap.add_argument("--p2", action="store_true", help="add a fourth head at stride = stem (small objects)")
    ap.add_argument("--time-budget", type=float, default=3150.0,
                    help="wall seconds; a machine too slow for --iters shortens the plan once, at "
                         "iteration 300, to end inside it (recorded in meta); also a hard stop")
    ap.add_argument("--stop-at", type=int, default=None,
                    help="end at this iteration with the LR schedule still planned for --iters: reproduces "
                         "a run the time budget stopped (its metadata records both numbers)")
    ap.add_argument("--lr", type=float, default=2.5e-3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--precision", choices=("auto", "bf16", "fp32"), default="auto",
                    help="bf16: forward/backward under bfloat16 autocast (weights, loss and EMA stay "
                         "float32), ~1.6x faster on a CPU with native bf16 (AVX512-BF16/AMX), about 7x "
                         "slower on one without (AVX2 only); auto: bf16 where native, else fp32 (the "
                         "metadata records which ran)")
    ap.add_argument("--out", type=Path, default=ROOT / "models")
    ap.add_argument("--ckpt", type=Path, default=None, help="checkpoint file (saved every 200 iters)")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--init", type=Path, default=None,
                    help="start from the EMA weights (and anchors) of another run's checkpoint, or from a "
                         "shipped X.onnx (+ X.meta.yaml, X.check.npz beside it), with a fresh optimizer and "
                         "LR schedule: a fine-tuning stage (use another --seed for new scenes)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)  # the checkpoint goes there from iteration 200 on
    data.CROP_ON_OBJECT = args.crop_on_object
    data.BROAD_SHARE = args.broad
    data.IGNORE_CUT = args.ignore_cut
    data.BIG_EVERY, data.BIG_BATCH = args.big_every, args.big_batch
    data.BIG_CROP = args.big_crop
    (data.INPUT_W, data.INPUT_H), (data.CROP_W, data.CROP_H) = args.input, args.crop
    data.ZOOM, data.BIG_ZOOM = args.zoom, args.big_zoom
    for name, (w, h) in (("--input", (data.INPUT_W, data.INPUT_H)),
                         ("--crop", (data.CROP_W, data.CROP_H))):
        if w % (8 * args.stem) or h % (8 * args.stem):
            ap.error(f"{name} {w}x{h}: both sides must be multiples of {8 * args.stem}")

    if args.precision == "auto":
        args.precision = "bf16" if native_bf16() else "fp32"
        print(f"--precision auto: {args.precision}", flush=True)
    revision = git_revision()  # the code that trains, not whatever HEAD is when the run ends
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True, warn_only=True)
    t_start = time.time()
    levels = 4 if args.p2 else 3
    nc = len(CLASS_NAMES)
    model = ShapesYolo(nc, stem=args.stem, stem_channels=args.stem_channels, p2=args.p2,
                       width=args.width)
    model.init_head_bias((data.CROP_H, data.CROP_W))
    init = None
    if args.init and args.init.suffix == ".onnx":  # a shipped model: its BatchNorms measured on scenes
        # drawn from the middle of this seed's range, which a stage never reaches (~25k of 100k scenes)
        probe = data.ReplayFeed(args.seed * data.TRAIN_SEED_LIMIT // 10 + data.TRAIN_SEED_LIMIT // 20,
                                args.batch, args.batch, args.batch, rng_seed=args.seed + 2)
        init = init_from_onnx(args.init, model, [probe.next_batch()[0] for _ in range(8)],
                              args.init.with_suffix("").with_suffix(".check.npz"))
    elif args.init:  # the model the earlier run would have shipped (its EMA) is where this stage starts
        init = torch.load(args.init, weights_only=False)
        model.load_state_dict(init["ema"])
    anchors_np = init["anchors"] if init else (
        data.log_grid_anchors(k=3 * levels) if args.anchors == "log-grid"
        else data.kmeans_anchors(args.seed, k=3 * levels)).reshape(levels, 3, 2)
    print("anchors (input px):", np.round(anchors_np, 1).tolist(), flush=True)
    anchors = torch.from_numpy(anchors_np.astype(np.float32))
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
    first_seed = args.seed * data.TRAIN_SEED_LIMIT // 10
    feed = data.ReplayFeed(first_seed, args.batch, args.fresh, args.replay_capacity, rng_seed=args.seed + 1)
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
    # a run resumed between PLAN_SPEED_FROM and PLAN_CHECK_AT measures from where it resumed (its own
    # start-up is before the loop, so it stays out of the speed as well)
    speed_from, el_from = max(start_it, PLAN_SPEED_FROM), 0.0
    while it < plan:
        el = time.time() - t_start
        if el > args.time_budget or it == args.stop_at:
            stopped_at = it
            why = "--stop-at" if it == args.stop_at else "time budget"
            print(f"{why} reached at iteration {it}", flush=True)
            break
        if it == speed_from:
            el_from = el
        if it == PLAN_CHECK_AT and speed_from < it:
            # the speed of steady steps (start-up, k-means and the first batches excluded: counting them
            # made the plan ~15 % shorter than the budget allowed), with 3 % of the budget left for export
            per_it = (el - el_from) / (it - speed_from)
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
        # the loss sums over images; a batch of fewer, larger windows (--big-batch) holds as many pixels as
        # a regular one, so it weighs as much as one: scaled to --batch images
        loss = loss * (args.batch / imgs.shape[0])
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
            print(f"it {it} lr {lr:.5f} loss {float(loss.detach()):.3f} box {parts[0]:.4f} "
                  f"obj {parts[1]:.4f} "
                  f"cls {parts[2]:.4f} elapsed {el:.0f}s", flush=True)
        if (it + 1) % 200 == 0:
            torch.save({"model": model.state_dict(), "ema": ema.state_dict(), "opt": opt.state_dict(),
                        "it": it + 1, "plan": plan, "elapsed": time.time() - t_start, "anchors": anchors_np,
                        "next_seed": feed.next_seed, "feed_rng": feed.rng.bit_generator.state}, ckpt)
        it += 1
    wall = time.time() - t_start
    print(f"training wall time {wall:.0f}s", flush=True)
    init_from = None if init is None else {"checkpoint": args.init.name, "iterations": int(init["it"]),
                                           "sha256": hashlib.sha256(args.init.read_bytes()).hexdigest()}
    export(ema, anchors_np, args, wall, feed.scenes_drawn, revision, plan, stopped_at, init_from)


def export(ema: torch.nn.Module, anchors: np.ndarray, args: argparse.Namespace, wall: float,
           scenes: int, revision: str, plan: int, stopped_at: int | None = None,
           init_from: dict[str, object] | None = None) -> None:
    args.out.mkdir(parents=True, exist_ok=True)
    net = fold_batchnorm(copy.deepcopy(ema).to(memory_format=torch.contiguous_format)).eval()
    onnx_path = args.out / "shapes_yolo.onnx"
    names = [f"head_s{s}" for s in net.strides]
    export_onnx(net, str(onnx_path), (data.INPUT_H, data.INPUT_W), names)
    # reference outputs for the ONNX Runtime check (tools/verify_onnx.py): folded and unfolded nets agree
    rng = np.random.default_rng(args.seed)
    x = np.stack([data.make_sample(data.TRAIN_SEED_LIMIT - 1 - i)[0] for i in range(2)] +
                 [rng.uniform(0, 1, (3, data.INPUT_H, data.INPUT_W)).astype(np.float32)])
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
        "input": {"name": "images", "width": data.INPUT_W, "height": data.INPUT_H, "channel_order": "rgb",
                  "mean": [0.0, 0.0, 0.0], "std": [255.0, 255.0, 255.0], "pad_value": data.PAD_VALUE},
        "decoder": {"kind": "yolov5_raw", "num_classes": len(CLASS_NAMES),
                    "strides": list(net.strides),
                    "anchors": [[round(float(v), 2) for v in a.reshape(-1)] for a in anchors]},
        "outputs": [{"name": n, "shape": [1, no, data.INPUT_H // s, data.INPUT_W // s]}
                    for n, s in zip(names, net.strides, strict=True)],
        "classes": list(CLASS_NAMES),
        "training": {"seed": args.seed, "revision": revision, "iterations": iters,
                     # the plan the LR schedule followed (--iters, unless shortened at PLAN_CHECK_AT)
                     "planned_iterations": plan, "requested_iterations": args.iters,
                     "time_bound": stopped_at is not None and stopped_at != args.stop_at,
                     "stem": args.stem, "stem_channels": args.stem_channels, "p2": args.p2,
                     "anchor_method": "init" if init_from else args.anchors,
                     "width": args.width, "box_weight": args.box_weight,
                     "small_ref": args.small_ref, "crop": [data.CROP_W, data.CROP_H],
                     "zoom": list(data.ZOOM), "broad_share": data.BROAD_SHARE,
                     "crop_on_object": data.CROP_ON_OBJECT,
                     "ignore_cut": data.IGNORE_CUT, "big_every": data.BIG_EVERY,
                     "big_crop": list(data.BIG_CROP), "big_batch": data.BIG_BATCH,
                     "big_zoom": list(data.BIG_ZOOM or data.ZOOM),
                     "batch": args.batch, "fresh_per_batch": args.fresh, "precision": args.precision,
                     "replay_capacity": args.replay_capacity, "scenes": scenes,
                     "train_seeds": f"[{args.seed * data.TRAIN_SEED_LIMIT // 10}, "
                                    f"{args.seed * data.TRAIN_SEED_LIMIT // 10 + scenes})",
                     "wall_time_s": round(wall, 1), "threads": args.threads, "torch": str(torch.__version__),
                     "lr": args.lr, "init_from": init_from},
        "accuracy": {"mAP50": None, "mAP50_95": None, "scenes": None, "seeds": None},
    }
    meta_path = args.out / "shapes_yolo.meta.yaml"
    meta_path.write_text(yaml.safe_dump(meta, sort_keys=False), encoding="utf-8")
    print(f"wrote {onnx_path} ({onnx_path.stat().st_size / 1e6:.2f} MB) and {meta_path}", flush=True)


if __name__ == "__main__":
    main()
