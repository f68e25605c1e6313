"""The detector's training loss (YOLOv5 style), kept apart from the data feed (train_data) and the loop.

Anchor-ratio matching (< ANCHOR_T), 3-cell neighbourhood, CIoU box loss, IoU-target objectness, BCE classes;
the box and class terms can weight small objects more (``small_ref``); objects a training window cut too
much to label can be left out of the objectness term (``ignores``) instead of counting as background.
"""

from __future__ import annotations

import math

import torch

ANCHOR_T = 4.0  # YOLOv5 anchor-match threshold on the w/h ratio


def anchor_match(wh: torch.Tensor, anchors: torch.Tensor) -> torch.Tensor:
    """(na, N) whether each anchor may predict each box: w and h both within ANCHOR_T x of the anchor's.
    ``wh`` (N, 2) and ``anchors`` (na, 2) in the same units."""
    ratio = wh[None] / anchors[:, None]                           # (na, N, 2)
    return torch.max(ratio, 1 / ratio).max(2).values < ANCHOR_T


def bbox_ciou(p: torch.Tensor, t: torch.Tensor, eps: float = 1e-7) -> torch.Tensor:
    """Complete-IoU of cxcywh boxes p and t (same shape (N,4))."""
    p1, p2 = p[:, :2] - p[:, 2:] / 2, p[:, :2] + p[:, 2:] / 2
    t1, t2 = t[:, :2] - t[:, 2:] / 2, t[:, :2] + t[:, 2:] / 2
    inter = (torch.min(p2, t2) - torch.max(p1, t1)).clamp(0).prod(1)
    union = p[:, 2:].prod(1) + t[:, 2:].prod(1) - inter + eps
    iou = inter / union
    cw = torch.max(p2, t2) - torch.min(p1, t1)
    c2 = (cw ** 2).sum(1) + eps
    rho2 = ((p[:, :2] - t[:, :2]) ** 2).sum(1)
    dv = torch.atan(t[:, 2] / (t[:, 3] + eps)) - torch.atan(p[:, 2] / (p[:, 3] + eps))
    v = (4 / math.pi ** 2) * dv ** 2
    with torch.no_grad():
        alpha = v / (v - iou + 1 + eps)
    return iou - (rho2 / c2 + v * alpha)


class YoloLoss:
    """YOLOv5's loss: anchor-ratio matching, 3-cell neighbourhood, CIoU box, IoU-target objectness."""

    def __init__(self, anchors: torch.Tensor, strides: tuple[int, ...], nc: int, w_box: float = 0.05,
                 small_ref: float = 0.0) -> None:
        self.anchors = anchors                # (nl, na, 2) input pixels
        self.strides = strides
        self.nc = nc
        # per-level objectness weights, finest first (YOLOv5's for 3 levels). YOLOv5's 4-level values
        # (4, 1, 0.25, 0.06) are for an extra coarse level; with --p2 the extra level is the finest, so the
        # stride 8/16/32 levels keep their 3-level weights and the stride-4 head gets the finest weight too
        # (YOLOv5's put large-object objectness at 0.06, and a run trained so lost large objects:
        # models/TRAINING_LOG.md)
        self.balance = (4.0, 1.0, 0.4) if len(strides) == 3 else (4.0, 4.0, 1.0, 0.4)
        self.bce = torch.nn.BCEWithLogitsLoss()
        self.w_box, self.w_obj, self.w_cls = w_box, 0.7, 0.3
        # small_ref > 0: box and class terms of an object under small_ref input px (sqrt of its area) weigh
        # small_ref/size (up to 3x), so the objects the detector misses most get more of the gradient
        self.small_ref = small_ref

    def _target_weights(self, wh: torch.Tensor, stride: int) -> torch.Tensor:
        """Weights of the positives (w, h in grid units), summing to 1: uniform (a plain mean), or
        small_ref/size for objects under small_ref input px. No positives: an empty sum, not a NaN mean."""
        if self.small_ref > 0:
            w = (self.small_ref / ((wh[:, 0] * wh[:, 1]).sqrt() * stride)).clamp(1.0, 3.0)
        else:
            w = torch.ones(len(wh))
        return w / w.sum().clamp(min=1e-9)

    def _ignored(self, ignores: torch.Tensor, level: int, shape: torch.Size) -> torch.Tensor:
        """(bs, na, gh, gw) mask of the cells whose objectness is left out: a cell of an anchor that would
        match the cut object's whole size (ratio < ANCHOR_T), with its centre inside the visible part."""
        mask = torch.zeros(shape, dtype=torch.bool)
        s = self.strides[level]
        anc = self.anchors[level]                                     # (na, 2) input pixels
        match = anchor_match(ignores[:, 5:7], anc)                    # (na, K)
        # cell (gx, gy) has its centre at ((gx + 0.5) s, (gy + 0.5) s): inside [x0, x1) x [y0, y1)
        lo = torch.ceil(ignores[:, 1:3] / s - 0.5).long().clamp(min=0)
        hi = torch.ceil(ignores[:, 3:5] / s - 0.5).long()
        for k in range(len(ignores)):
            b, (x0, y0), (x1, y1) = int(ignores[k, 0]), lo[k].tolist(), hi[k].tolist()
            mask[b, match[:, k], y0:y1, x0:x1] = True
        return mask

    def __call__(self, outs: tuple[torch.Tensor, ...], targets: torch.Tensor,
                 ignores: torch.Tensor | None = None) -> tuple[torch.Tensor, list[float]]:
        # targets: (M, 6) [image index, cls, cx, cy, w, h] in input pixels
        # ignores: (K, 7) [image index, x0, y0, x1, y1 (visible part), w, h (whole object)] in input pixels
        lbox = torch.zeros(()); lobj = torch.zeros(()); lcls = torch.zeros(())  # noqa: E702
        off = torch.tensor([[0, 0], [1, 0], [0, 1], [-1, 0], [0, -1]], dtype=torch.float32)
        for i, out in enumerate(outs):
            bs, _, gh, gw = out.shape
            na = self.anchors.shape[1]
            p = out.view(bs, na, 5 + self.nc, gh, gw).permute(0, 1, 3, 4, 2)
            tobj = torch.zeros(p.shape[:4])
            s = self.strides[i]
            anc = self.anchors[i] / s                     # grid units
            if len(targets):
                t = targets.clone()
                t[:, 2:] /= s
                a_idx, t_idx = anchor_match(t[:, 4:6], anc).nonzero(as_tuple=True)
                tt = t[t_idx]
                gxy = tt[:, 2:4]
                gxi = torch.tensor([gw, gh], dtype=torch.float32) - gxy
                j, k = ((gxy % 1 < 0.5) & (gxy > 1)).T
                l_, m = ((gxi % 1 < 0.5) & (gxi > 1)).T
                sel = torch.stack([torch.ones_like(j), j, k, l_, m])  # (5, n)
                tt5 = tt.repeat(5, 1, 1)[sel]
                a5 = a_idx.repeat(5, 1)[sel]
                offs = off[:, None].expand(5, len(tt), 2)[sel]
                gij = (tt5[:, 2:4] - offs).long()
                gi = gij[:, 0].clamp(0, gw - 1); gj = gij[:, 1].clamp(0, gh - 1)  # noqa: E702
                b = tt5[:, 0].long()
                ps = p[b, a5, gj, gi]
                pxy = ps[:, :2].sigmoid() * 2 - 0.5
                pwh = (ps[:, 2:4].sigmoid() * 2) ** 2 * anc[a5]
                tbox = torch.cat([tt5[:, 2:4] - torch.stack([gi, gj], 1).float(), tt5[:, 4:6]], 1)
                ciou = bbox_ciou(torch.cat([pxy, pwh], 1), tbox)
                tobj[b, a5, gj, gi] = ciou.detach().clamp(0)
                tc = torch.zeros_like(ps[:, 5:])
                tc[torch.arange(len(tt5)), tt5[:, 1].long()] = 1.0
                wt = self._target_weights(tt5[:, 4:6], s)
                lbox = lbox + ((1 - ciou) * wt).sum()
                lcls = lcls + (torch.nn.functional.binary_cross_entropy_with_logits(
                    ps[:, 5:], tc, reduction="none").mean(1) * wt).sum()
            if ignores is not None and len(ignores):
                # positives stay; the rest of a cut object's cells are neither object nor background
                per_cell = torch.nn.functional.binary_cross_entropy_with_logits(p[..., 4], tobj,
                                                                                reduction="none")
                left_out = self._ignored(ignores, i, tobj.shape) & (tobj == 0)
                lobj = lobj + per_cell.masked_fill(left_out, 0.0).mean() * self.balance[i]
            else:
                lobj = lobj + self.bce(p[..., 4], tobj) * self.balance[i]
        loss = self.w_box * lbox + self.w_obj * lobj + self.w_cls * lcls
        return loss * outs[0].shape[0], [float(lbox.detach()), float(lobj.detach()), float(lcls.detach())]
