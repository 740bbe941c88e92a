"""Collective communication patterns as per-rank schedules of phases.

A schedule is a list of :class:`Phase` for one rank and one channel: in each
phase the rank writes ``sends`` (peer, bytes) and expects ``recvs`` (peer,
bytes); a phase is complete when its writes are ACKed and its expected bytes
have arrived, and only then does the next one start (the data dependency of
the real algorithm, without the arithmetic; with the job's ``slicing`` the runner
forwards the next phase's data chunk by chunk as this phase's arrives, as NCCL's
slices do). ``size`` follows nccl-tests: the
buffer size of the operation in bytes, and :data:`BUSBW_FACTOR` gives
nccl-tests' bus-bandwidth correction for each pattern.
"""
from dataclasses import dataclass, field


@dataclass
class Phase:
    sends: list = field(default_factory=list)   # [(peer_rank, nbytes)]
    recvs: list = field(default_factory=list)   # [(peer_rank, nbytes)]


def split_evenly(total, parts):
    """`total` bytes cut into `parts` sizes that differ by at most one."""
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def _ring_steps(rank, n, parts, first_send_offset, steps):
    nxt, prv = (rank + 1) % n, (rank - 1) % n
    out = []
    for s in range(steps):
        send_part = parts[(rank + first_send_offset - s) % n]
        recv_part = parts[(rank + first_send_offset - s - 1) % n]
        out.append(Phase(sends=[(nxt, send_part)] if send_part else [],
                         recvs=[(prv, recv_part)] if recv_part else []))
    return out


def ring_allreduce(rank, n, size, chunk):
    """Reduce-scatter then all-gather around the ring: 2(n-1) steps of size/n."""
    parts = split_evenly(size, n)
    return _ring_steps(rank, n, parts, 0, n - 1) + _ring_steps(rank, n, parts, 1, n - 1)


def reducescatter(rank, n, size, chunk):
    return _ring_steps(rank, n, split_evenly(size, n), 0, n - 1)


def allgather(rank, n, size, chunk):
    return _ring_steps(rank, n, split_evenly(size, n), 0, n - 1)


def alltoall(rank, n, size, chunk):
    """Every rank writes size/n to every other rank, all at once."""
    parts = split_evenly(size, n)
    peers = [p for p in range(n) if p != rank]
    return [Phase(sends=[(p, parts[p]) for p in peers if parts[p]],
                  recvs=[(p, parts[rank]) for p in peers if parts[rank]])]


def default_alltoallv_weights(n):
    """An uneven but fixed exchange, like MoE token routing: rank r weighs peer p as 1 + (r + 2p) mod n."""
    return [[1 + (r + 2 * p) % n for p in range(n)] for r in range(n)]


def split_weighted(total, weights):
    """`total` bytes cut in proportion to `weights` (integers that add up to `total`)."""
    whole = sum(weights)
    parts = [total * w // whole for w in weights]
    for i in sorted(range(len(weights)), key=lambda i: -weights[i])[:total - sum(parts)]:
        parts[i] += 1
    return parts


def alltoallv(rank, n, size, chunk, weights=None):
    """All-to-All(v): rank r's buffer of `size` bytes is split over the ranks in proportion to row r
    of `weights` (n x n; its own share stays local); all writes at once."""
    weights = weights or default_alltoallv_weights(n)
    rows = [split_weighted(size, weights[r]) for r in range(n)]
    peers = [p for p in range(n) if p != rank]
    return [Phase(sends=[(p, rows[rank][p]) for p in peers if rows[rank][p]],
                  recvs=[(p, rows[p][rank]) for p in peers if rows[p][rank]])]


def tree_allreduce(rank, n, size, chunk):
    """Binary tree rooted at rank 0: reduce up (children first), then broadcast down.

    Not chunk-pipelined (NCCL pipelines its double binary tree); channels still
    run in parallel.
    """
    parent = (rank - 1) // 2 if rank else None
    children = [c for c in (2 * rank + 1, 2 * rank + 2) if c < n]
    phases = []
    if children:
        phases.append(Phase(recvs=[(c, size) for c in children]))
    if parent is not None:
        phases.append(Phase(sends=[(parent, size)]))
        phases.append(Phase(recvs=[(parent, size)]))
    if children:
        phases.append(Phase(sends=[(c, size) for c in children]))
    return phases


def incast(rank, n, size, chunk):
    """N:1 gather to rank 0, as nccl-tests' gather: each other rank writes size/n to the root."""
    parts = split_evenly(size, n)
    if rank == 0:
        return [Phase(recvs=[(p, parts[p]) for p in range(1, n) if parts[p]])]
    return [Phase(sends=[(0, parts[rank])] if parts[rank] else [])]


def pipeline(rank, n, size, chunk):
    """Point-to-point chain 0 -> 1 -> ... -> n-1, forwarded chunk by chunk (store and forward)."""
    chunks = [chunk] * (size // chunk) + ([size % chunk] if size % chunk else [])
    phases = []
    for j in range(len(chunks) + 1):
        ph = Phase()
        if rank > 0 and j < len(chunks):
            ph.recvs.append((rank - 1, chunks[j]))
        if rank < n - 1:
            # the first rank has its data already: it sends chunk j in phase j
            k = j if rank == 0 else j - 1
            if 0 <= k < len(chunks):
                ph.sends.append((rank + 1, chunks[k]))
        if ph.sends or ph.recvs:
            phases.append(ph)
    return phases


def stream(rank, n, size, chunk):
    """perftest-like streaming: rank 2i writes to rank 2i+1 back to back (an odd last rank idles)."""
    if rank % 2 == 0 and rank + 1 < n:
        return [Phase(sends=[(rank + 1, size)])]
    if rank % 2 == 1:
        return [Phase(recvs=[(rank - 1, size)])]
    return []


def workload(rank, n, size, chunk, preset=None):
    """One LLM training iteration (DP/TP/PP/MoE phases): traffic/workload.py."""
    from traffic.workload import DEFAULT_PRESET, workload as iteration
    return iteration(rank, n, size, chunk, preset or DEFAULT_PRESET)


PATTERNS = {
    "ring_allreduce": ring_allreduce,
    "tree_allreduce": tree_allreduce,
    "allgather": allgather,
    "reducescatter": reducescatter,
    "alltoall": alltoall,
    "alltoallv": alltoallv,
    "incast": incast,
    "pipeline": pipeline,
    "stream": stream,
    "workload": workload,
}

# nccl-tests' busbw = algbw x factor(n) (doc/PERFORMANCE.md there).
BUSBW_FACTOR = {
    "ring_allreduce": lambda n: 2 * (n - 1) / n,
    "tree_allreduce": lambda n: 2 * (n - 1) / n,
    "allgather": lambda n: (n - 1) / n,
    "reducescatter": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
    "alltoallv": lambda n: (n - 1) / n,
    "incast": lambda n: (n - 1) / n,
    "pipeline": lambda n: 1.0,
    "stream": lambda n: 1.0,
    "workload": lambda n: 1.0,       # a mix of collectives: bus bandwidth is the algorithm bandwidth
}

# What nccl-tests would print in the "redop" column.
REDUCING = {"ring_allreduce", "tree_allreduce", "reducescatter"}


def schedule(pattern, rank, n, size, chunk, weights=None, preset=None):
    """Phases of `rank` for one channel carrying `size` bytes (`weights`: alltoallv's matrix;
    `preset`: the workload pattern's, traffic/workload.py)."""
    if pattern not in PATTERNS:
        raise ValueError(f"unknown pattern {pattern!r}; known: {', '.join(PATTERNS)}")
    if n < 2:
        raise ValueError(f"pattern {pattern}: needs at least 2 ranks, got {n}")
    if not 0 <= rank < n:
        raise ValueError(f"rank {rank} is not in 0..{n - 1}")
    if pattern == "alltoallv":
        return alltoallv(rank, n, size, chunk, weights)
    if pattern == "workload":
        return workload(rank, n, size, chunk, preset)
    return PATTERNS[pattern](rank, n, size, chunk)


def peers(pattern, rank, n, size=4096 * 64, chunk=4096, weights=None, preset=None):
    """Ranks this rank exchanges data with (in either direction)."""
    if pattern == "alltoallv":      # by weight, so that no size leaves a pair without connections
        w = weights or default_alltoallv_weights(n)
        return [p for p in range(n) if p != rank and (w[rank][p] or w[p][rank])]
    found = set()
    if pattern == "workload":
        size = max(size, n * 4096)      # every phase's share non-empty, so every peer has a connection
    for ph in schedule(pattern, rank, n, max(size, n * 4), chunk, weights, preset):
        found.update(p for p, _ in ph.sends)
        found.update(p for p, _ in ph.recvs)
    return sorted(found)


def expected_bytes(pattern, rank, n, size, chunk, weights=None, preset=None):
    """(bytes sent, bytes received) by `rank` for one operation on one channel."""
    phases = schedule(pattern, rank, n, size, chunk, weights, preset)
    return (sum(b for ph in phases for _, b in ph.sends), sum(b for ph in phases for _, b in ph.recvs))
