"""Write a few generator scenes to samples/ (PNG) with their ground truth (samples/ground_truth.json).

    python tools/make_samples.py            # numpy + cv2 only; deterministic
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import cv2

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dla_infer_node.core.synth import CLASS_NAMES, generate_scene  # noqa: E402

# held-out seeds (>= 30_000_000: neither training, evaluation nor the end-to-end test range)
SAMPLES = [(30_000_001, 640, 480), (30_000_002, 640, 480), (30_000_003, 640, 480),
           (30_000_004, 640, 480), (30_000_005, 800, 450)]


def main() -> None:
    out = ROOT / "samples"
    out.mkdir(exist_ok=True)
    truth = {}
    for seed, w, h in SAMPLES:
        s = generate_scene(seed, w, h)
        name = f"scene_{seed}.png"
        cv2.imwrite(str(out / name), cv2.cvtColor(s.image, cv2.COLOR_RGB2BGR))
        truth[name] = {"seed": seed, "width": w, "height": h, "objects": [
            {"class": CLASS_NAMES[int(c)], "bbox": [round(float(v), 2) for v in b]}
            for b, c in zip(s.boxes, s.class_ids, strict=True)]}
    (out / "ground_truth.json").write_text(json.dumps(truth, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {len(SAMPLES)} samples to {out}")


if __name__ == "__main__":
    main()
