"""A minimal ICMP echo client, run inside a host: `python -m testbed.net.ping IP...`.

The machines this runs on may lack iputils' `ping` (it is not among the packages
`make setup` installs), and pingall should not depend on it. This pings any number of
targets at once from one raw socket and prints one line per target:
``ok <ip> <rtt_ms>`` or ``fail <ip>``. Exit status 0 only if every target answered.
"""
import argparse
import os
import select
import socket
import struct
import sys
import time

from testbed.argtypes import number, whole

ECHO_REQUEST, ECHO_REPLY = 8, 0


def _checksum(data):
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    total = (total >> 16) + (total & 0xFFFF)
    total += total >> 16
    return ~total & 0xFFFF


def _echo(ident, seq, payload=b"rocelab-ping"):
    header = struct.pack("!BBHHH", ECHO_REQUEST, 0, 0, ident, seq)
    csum = _checksum(header + payload)
    return struct.pack("!BBHHH", ECHO_REQUEST, 0, csum, ident, seq) + payload


def ping_many(targets, count=1, timeout_s=2.0, interval_s=0.2):
    """{ip: rtt_ms or None}: each target gets up to `count` tries; the first reply counts."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    ident = os.getpid() & 0xFFFF
    results = {ip: None for ip in targets}
    sent_at = {}
    try:
        for attempt in range(count):
            for i, ip in enumerate(targets):
                if results[ip] is None:
                    seq = (attempt * len(targets) + i) & 0xFFFF
                    sent_at[seq] = (ip, time.monotonic())
                    try:
                        sock.sendto(_echo(ident, seq), (ip, 0))
                    except OSError:
                        pass  # unreachable from here: stays a failure
            deadline = time.monotonic() + (timeout_s if attempt == count - 1 else interval_s)
            while any(v is None for v in results.values()):
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([sock], [], [], left)[0]:
                    break
                packet, _ = sock.recvfrom(2048)
                ihl = (packet[0] & 0x0F) * 4
                kind, _code, _csum, rid, rseq = struct.unpack("!BBHHH", packet[ihl:ihl + 8])
                if kind == ECHO_REPLY and rid == ident and rseq in sent_at:
                    ip, t = sent_at[rseq]
                    if results.get(ip) is None:
                        results[ip] = (time.monotonic() - t) * 1000.0
            if all(v is not None for v in results.values()):
                break
    finally:
        sock.close()
    return results


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m testbed.net.ping", description=__doc__.split("\n\n")[0])
    p.add_argument("targets", nargs="+", metavar="IP")
    p.add_argument("-c", "--count", type=whole(1, 1000), default=1, help="tries per target (default 1)")
    p.add_argument("-W", "--timeout", type=number(0, 3600, lo_open=True), default=2.0, help="seconds to wait for the last try")
    args = p.parse_args(argv)
    for ip in args.targets:
        try:
            socket.inet_aton(ip)
        except OSError:
            p.error(f"{ip!r} is not an IPv4 address")
    results = ping_many(args.targets, args.count, args.timeout)
    for ip, rtt in results.items():
        print(f"ok {ip} {rtt:.3f}" if rtt is not None else f"fail {ip}")
    return 0 if all(v is not None for v in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
