"""What a virtual-time run will cost, estimated before anything is built, and the budget it
must fit: a run too large is refused with one line instead of running for hours or swapping.

Events: every data packet crosses up to four wires and three switches (an arrival and a
service each), plus its share of ACKs, CTS and NIC wake-ups: ~10 events per MTU-sized packet.
Memory: each switch holds its own pipeline (tables, registers) and queues.
"""
DEFAULT_MAX_EVENTS = 2e8           # ~30 minutes at ~100k events/s on one core of a laptop
EVENTS_PER_PACKET = 10
MAX_MEMORY_BYTES = 4 << 30         # stay well inside a small machine's RAM
BYTES_PER_SWITCH = 6 << 20         # a fabric.p4 pipeline, its P4Runtime server and queues
BYTES_PER_HOST = 1 << 20           # NIC, QPs, runner state


def estimate(clos, job):
    """(events, bytes of memory) for running `job` (a job dict) on `clos` in virtual time."""
    from traffic.collectives import expected_bytes
    n = len(job["ranks"])
    mtu = job["nic"]["mtu"]
    repeats = job["iterations"] + job["warmup"]
    total = 0
    for size in job["sizes"]:
        per_channel = max(1, size // max(1, job["channels"]))
        sent = sum(expected_bytes(job["pattern"], r, n, per_channel, job["chunk_bytes"])[0] for r in range(n))
        total += sent * job["channels"] * (job["iterations"] if job["pattern"] == "stream" else repeats)
    packets = total / mtu
    events = packets * EVENTS_PER_PACKET
    memory = len(clos.switches) * BYTES_PER_SWITCH + len(clos.hosts) * BYTES_PER_HOST
    return events, memory


def check_budget(clos, job, max_events=None):
    """Raise ExperimentError (one line naming the figures) when the run would not fit."""
    from testbed.net.experiment import ExperimentError
    limit = DEFAULT_MAX_EVENTS if max_events is None else max_events
    if not limit > 0:
        raise ExperimentError(f"--max-events {max_events}: must be a positive number")
    events, memory = estimate(clos, job)
    if events > limit:
        raise ExperimentError(f"this run needs about {events:.2g} events, over the budget of {limit:.2g} "
                              "(--max-events): use smaller --size, fewer --iterations or a smaller fabric")
    if memory > MAX_MEMORY_BYTES:
        raise ExperimentError(f"{len(clos.switches)} switches and {len(clos.hosts)} hosts need about "
                              f"{memory / 2**30:.1f} GiB, over the {MAX_MEMORY_BYTES / 2**30:.0f} GiB budget")
    return events, memory
