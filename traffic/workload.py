"""One LLM training iteration as a per-rank schedule: the `workload` pattern.

The scale-out traffic of a training step, after AMD's analysis of GPT-4, Llama 3,
DeepSeek-V2 and Grok traffic on RoCE fabrics: tensor parallelism (TP) moves activations with
AllGather / ReduceScatter inside a TP group, pipeline parallelism (PP) sends activations and
gradients point to point between neighbouring stages (bounded, directional, the most
ECMP-friendly pattern), MoE models exchange tokens with All-to-All(v) inside the expert group
(up to ~20% of the bytes, bursty and skewed), and data parallelism (DP) ends the step with a
gradient AllReduce: elephant flows carrying ~80% of the bytes.

Ranks are laid out TP-innermost: rank = ((dp * PP) + pp) * TP + tp. One iteration is

    forward:  TP AllGather -> MoE dispatch (All-to-All(v)) -> PP send to the next stage
    backward: PP send to the previous stage -> MoE combine -> TP ReduceScatter
    then:     DP ring AllReduce of the gradients

`size` is the bytes one rank moves in the iteration, split over the phases by the preset's
shares; each sub-collective then follows the same schedules as the stand-alone patterns.

Presets:
* ``dense`` (Llama-3-like): TP 4, PP 2, DP the rest; shares DP 80%, TP 12%, PP 8%.
* ``moe`` (DeepSeek-V2-like): no TP, PP 2, expert parallelism over the DP group with
  device-limited routing (each rank's tokens go to at most 3 other ranks, skewed);
  shares DP 62%, MoE 20%, PP 18%.
"""
from dataclasses import dataclass

from traffic import collectives as C

PRESETS = ("dense", "moe")
DEFAULT_PRESET = "dense"


@dataclass(frozen=True)
class Layout:
    tp: int
    pp: int
    dp: int
    shares: dict                 # phase -> fraction of `size`
    moe_devices: int = 0         # device-limited routing: peers per rank (0: dense, no MoE)
    moe_skew: float = 2.0        # the most loaded peer gets this many times the least loaded's tokens


def _fit(n, want):
    """The largest divisor of n not above `want` (at least 1)."""
    return max(d for d in range(1, min(want, n) + 1) if n % d == 0)


def layout(n, preset=DEFAULT_PRESET):
    if preset not in PRESETS:
        raise ValueError(f"workload preset {preset!r}: choose one of {', '.join(PRESETS)}")
    if preset == "dense":
        tp = _fit(n, 4)
        pp = _fit(n // tp, 2)
        return Layout(tp, pp, n // (tp * pp), {"dp": 0.80, "tp": 0.12, "pp": 0.08})
    pp = _fit(n, 2)
    return Layout(1, pp, n // pp, {"dp": 0.62, "moe": 0.20, "pp": 0.18}, moe_devices=3)


def _coords(rank, lay):
    tp = rank % lay.tp
    pp = (rank // lay.tp) % lay.pp
    dp = rank // (lay.tp * lay.pp)
    return dp, pp, tp


def _rank(dp, pp, tp, lay):
    return (dp * lay.pp + pp) * lay.tp + tp


def _mapped(phases, members):
    """Sub-collective phases over group indices -> phases over global ranks."""
    return [C.Phase(sends=[(members[p], b) for p, b in ph.sends if b],
                    recvs=[(members[p], b) for p, b in ph.recvs if b]) for ph in phases]


def moe_weights(k, devices, skew):
    """k x k All-to-All(v) weights of device-limited routing: row r sends to its `devices` next
    ranks in the group (cyclically), the first of them `skew` times as much as the last."""
    rows = []
    for r in range(k):
        row = [0.0] * k
        chosen = [(r + 1 + i) % k for i in range(min(devices, k - 1))]
        for i, p in enumerate(chosen):
            row[p] = skew - (skew - 1.0) * i / max(1, len(chosen) - 1)
        row[r] = 0.0
        rows.append([round(w * 1000) for w in row])
    return rows


def workload(rank, n, size, chunk, preset=DEFAULT_PRESET):
    lay = layout(n, preset)
    dp, pp, tp = _coords(rank, lay)
    share = {k: int(size * v) for k, v in lay.shares.items()}
    tp_group = [_rank(dp, pp, t, lay) for t in range(lay.tp)]
    dp_group = [_rank(d, pp, tp, lay) for d in range(lay.dp)]
    fwd, bwd = [], []
    if lay.tp > 1 and share.get("tp"):
        half = share["tp"] // 2
        fwd += _mapped(C.allgather(tp, lay.tp, half * lay.tp, chunk), tp_group)
        bwd_tp = _mapped(C.reducescatter(tp, lay.tp, half * lay.tp, chunk), tp_group)
    else:
        bwd_tp = []
    moe_fwd = moe_bwd = []
    if lay.moe_devices and lay.dp > 1 and share.get("moe"):
        weights = moe_weights(lay.dp, lay.moe_devices, lay.moe_skew)
        half = share["moe"] // 2
        moe_fwd = _mapped(C.alltoallv(dp, lay.dp, half, chunk, weights), dp_group)
        moe_bwd = _mapped(C.alltoallv(dp, lay.dp, half, chunk, weights), dp_group)
    fwd += moe_fwd
    if lay.pp > 1 and share.get("pp"):
        half = share["pp"] // 2
        nxt = _rank(dp, pp + 1, tp, lay) if pp + 1 < lay.pp else None
        prv = _rank(dp, pp - 1, tp, lay) if pp > 0 else None
        # forward: activations flow to the next stage; backward: gradients flow back
        fwd.append(C.Phase(sends=[(nxt, half)] if nxt is not None else [],
                           recvs=[(prv, half)] if prv is not None else []))
        bwd.append(C.Phase(sends=[(prv, half)] if prv is not None else [],
                           recvs=[(nxt, half)] if nxt is not None else []))
    bwd += moe_bwd + bwd_tp
    tail = _mapped(C.ring_allreduce(dp, lay.dp, share["dp"], chunk), dp_group) if lay.dp > 1 else []
    return [ph for ph in fwd + bwd + tail if ph.sends or ph.recvs]
