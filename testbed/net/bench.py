"""`rocelab bench boot`: boot-to-pingall time of a 2-spine/4-leaf/8-host Clos and RSS per switch.

Targets (printed beside the figures, never asserted): boot to 0%-loss pingall <= 10 s,
resident memory <= 60 MB per switch. Runs on the engine, and on the kernel stand-in as
a baseline for the Mininet side alone. Must run as root.
"""
import os
import sys
import tempfile
import time

BOOT_TARGET_S = 10.0
RSS_TARGET_MB = 60.0
SHAPE = dict(spines=2, leaves=4, hosts_per_leaf=2)


def measure(target, out_dir, grpc_base_port=50000):
    """{boot_s, pingall_s, total_s, lost, sent, rss_mb: {switch: MB}, timings} for one boot."""
    from testbed.clos import ClosSpec, build
    from testbed.net.fabric import FabricNet

    clos = build(ClosSpec(**SHAPE, grpc_base_port=grpc_base_port))
    t0 = time.monotonic()
    fabric = FabricNet(clos, target=target, out_dir=out_dir, pcap=False)
    with fabric:
        booted = time.monotonic()
        sent, lost, _failures = fabric.pingall(timeout_s=2.0, count=3)
        pinged = time.monotonic()
        rss = {name: size / 2**20 for name, size in fabric.rss_per_switch().items()}
        timings = dict(fabric.timings)
    torn_down = time.monotonic()
    return {"boot_s": booted - t0, "pingall_s": pinged - booted, "total_s": pinged - t0,
            "teardown_s": torn_down - pinged, "sent": sent, "lost": lost, "rss_mb": rss, "timings": timings}


def _print(target, m):
    verdict = "meets" if m["total_s"] <= BOOT_TARGET_S and m["lost"] == 0 else "misses"
    print(f"   {target:>7}: boot {m['boot_s']:.2f} s + pingall {m['pingall_s']:.2f} s = {m['total_s']:.2f} s "
          f"({m['sent'] - m['lost']}/{m['sent']} answered; {verdict} the {BOOT_TARGET_S:g} s target); "
          f"teardown {m['teardown_s']:.2f} s")
    steps = ", ".join(f"{k.removesuffix('_s')} {v:.2f}" for k, v in m["timings"].items())
    print(f"            cumulative boot steps (s): {steps}")
    if m["rss_mb"]:
        values = sorted(m["rss_mb"].values())
        worst = max(m["rss_mb"], key=m["rss_mb"].get)
        print(f"            RSS per switch: min {values[0]:.1f} MB, median {values[len(values) // 2]:.1f} MB, "
              f"max {values[-1]:.1f} MB ({worst}); target <= {RSS_TARGET_MB:g} MB: "
              f"{'met' if values[-1] <= RSS_TARGET_MB else 'missed'}")


def main(quick=False):
    from testbed.net.fabric import FabricError
    from testbed.net.nodes import SwitchStartError

    if os.geteuid() != 0:
        print("   needs root (Mininet creates namespaces and veths)", file=sys.stderr)
        return 2
    print(f"   {SHAPE['spines']} spines, {SHAPE['leaves']} leaves, {SHAPE['leaves'] * SHAPE['hosts_per_leaf']} hosts; "
          "time from nothing to a 0%-loss pingall (every host to every other, 3 tries)")
    status = 0
    for target in ("engine", "kernel"):
        with tempfile.TemporaryDirectory(prefix=f"rocelab-bench-{target}-") as out:
            try:
                _print(target, measure(target, out))
            except (FabricError, SwitchStartError) as exc:
                print(f"   {target:>7}: not measured: {str(exc).splitlines()[0]}")
                status = status or (1 if target == "engine" else 0)
    return status
