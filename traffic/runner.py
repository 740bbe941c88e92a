"""Run one rank of a job: the NIC, the collective schedule, CTS admission, barriers, the report.

One process per rank, inside its host (``rocelab traffic run --job J --rank N``).
Ranks meet only over the network: a UDP barrier before the first size, between
sizes and at the end; data and CTS flow through the emulated NIC. Every wait
is bounded by the job's ``timeout_s``; a rank that runs out of time still
writes its report, with ``"status": "timeout"``.
"""
import socket
import struct
import time

from traffic import collectives
from traffic.control import ControlPlane
from traffic.nic import Nic

INFINITE_CREDIT = 1 << 62
# After the final barrier a rank keeps answering for this long: a UDP "go" lost on the way,
# or a peer's ACK that has not come back yet, gets its answer from a rank still there.
LINGER_S = 0.3
LINGER_POLL_S = 0.005


def _message(exc):
    """The text of an error without Python's "[Errno N]" prefix; raw sockets need privileges."""
    if isinstance(exc, OSError) and exc.strerror:
        hint = " (raw sockets need root or CAP_NET_RAW)" if exc.errno == 1 else ""
        return exc.strerror + hint
    return str(exc)


class RunTimeout(Exception):
    pass


class RunFailed(Exception):
    pass


class Connection:
    """Everything between this rank and one peer on one channel (both directions)."""

    def __init__(self, peer, channel, peer_ip, peer_mac, cts):
        self.peer = peer
        self.channel = channel
        self.peer_ip = peer_ip
        self.peer_mac = peer_mac
        self.qps = []
        self.rr = 0
        # send direction (bytes, cumulative over the whole run)
        self.send_planned = 0        # scheduled so far
        self.send_target = 0         # released by started phases
        self.posted = 0
        self.acked = 0
        self.granted = 0 if cts else INFINITE_CREDIT
        self.imm_at = {}             # send_target mark -> immediate data of the message ending there
        # receive direction
        self.recv_planned = 0
        self.recv_cum = 0            # arrived in order
        self.consumed = 0            # taken in by the host (= recv_cum unless the NIC is a slow receiver)
        self.granted_sent = 0
        self.recv_released = 0       # receive mark of the phases started so far
        self.last_rx = 0.0


class ChannelRun:
    def __init__(self, channel, phases, phases_per_iter):
        self.channel = channel
        self.phases = phases         # [(sends [(conn, mark, nbytes, phase_no)], recvs [(conn, mark, nbytes)])]
        self.idx = -1
        self.per_iter = phases_per_iter
        self.iter_end = {}

    @property
    def done(self):
        return self.idx >= len(self.phases)


def _read_routes():
    routes = []
    try:
        with open("/proc/net/route") as f:
            next(f)
            for line in f:
                cols = line.split()
                dest, gw, mask = (struct.unpack("<I", bytes.fromhex(c))[0] for c in (cols[1], cols[2], cols[7]))
                routes.append((mask, dest, gw, cols[0]))
    except (OSError, StopIteration, ValueError, IndexError):
        pass
    return sorted(routes, reverse=True)


def _next_hop(ip):
    """The IP whose MAC frames to `ip` must carry: the route's gateway, or `ip` itself."""
    addr = struct.unpack("<I", socket.inet_aton(ip))[0]
    for mask, dest, gw, _iface in _read_routes():
        if addr & mask == dest:
            return socket.inet_ntoa(struct.pack("<I", gw)) if gw else ip
    return ip


def _arp_lookup(ip):
    try:
        with open("/proc/net/arp") as f:
            next(f)
            for line in f:
                cols = line.split()
                if cols[0] == ip and int(cols[2], 16) & 0x2 and cols[3] != "00:00:00:00:00:00":
                    return cols[3]
    except (OSError, StopIteration, ValueError, IndexError):
        pass
    return None


class RankRunner:
    def __init__(self, job, rank, clock=time.monotonic, log=None, io=None):
        """io: the host's ports when they are not the kernel's (virtual time): an object with
        `nic_port` (send/recv/close like a raw socket), `control_socket` (a bound datagram
        socket), `wait(seconds)` (sleep until input arrives or the time passes) and optionally
        `tx_lookahead_s` (see traffic.nic.Nic) and `linger_s` (how long the rank stays after the
        final barrier; default LINGER_S)."""
        if not 0 <= rank < job.n:
            raise ValueError(f"--rank {rank}: the job has ranks 0..{job.n - 1}")
        self.job = job
        self.rank = rank
        self.me = job.ranks[rank]
        self.now = clock
        self.io = io
        self.log = log or (lambda msg: None)
        self.peers = collectives.peers(job.pattern, rank, job.n, weights=job.alltoallv_weights, preset=job.preset)
        self.conns = {}
        self.channel_runs = []
        self.results = []
        self.perftest = []
        self.status = "ok"
        self.error = None
        self.nic = None
        self.ctrl = None
        self.timing = {}
        self.next_hop_macs = {}
        self._epoch = 0
        self._cts_check = 0.0
        self._msg_size = None        # set by _plan: until then a CTS only records its credit
        self._credit_out = 0         # receiver-wide mode: credit granted, not yet consumed
        self._admit_next = 0         # receiver-wide mode: whose turn it is for the next chunk
        self._progress = False       # the NIC reported something phases wait for (run_size)

    # -- set-up ----------------------------------------------------------------------------------
    def _resolve_mac(self, peer, deadline):
        rh = self.job.ranks[peer]
        fixed = self.me.gateway_mac or self.job.gateway_mac
        if fixed:
            return fixed, "configured gateway"
        hop = _next_hop(rh.ip)
        while True:
            mac = _arp_lookup(hop)
            if mac:
                return mac, f"ARP for {hop}"
            if self.now() > deadline:
                break
            self.ctrl.hello([peer])
            self.ctrl.poll()
            self.io.wait(0.02) if self.io else time.sleep(0.02)
        if hop == rh.ip:
            return rh.mac, "job file (no ARP answer)"
        raise RunFailed(f"no MAC for next hop {hop} towards rank {peer} ({rh.ip}); "
                        f"set gateway_mac in the job")

    def setup(self):
        job = self.job
        self.t0 = self.now()
        self.deadline = self.t0 + job.timeout_s
        io = self.io
        self.nic = Nic(self.me.iface, self.me.mac, self.me.ip, job.nic, clock=self.now,
                       port=io.nic_port if io else None, wait=io.wait if io else None,
                       tx_lookahead_s=getattr(io, "tx_lookahead_s", 0.0))
        self.ctrl = ControlPlane(self.rank, [r.ip for r in job.ranks], job.control_port,
                                 dscp=job.nic.classes["control"].dscp,
                                 sock=io.control_socket if io else None)
        self.nic.extra_fds = [self.ctrl.sock]
        self.nic.on_rx_bytes = self._on_rx_bytes
        self.nic.on_rx_consumed = self._on_rx_consumed
        self.nic.on_cts = self._on_cts
        self.ctrl.hello(self.peers)
        arp_deadline = min(self.deadline, self.now() + 2.0)
        for peer in self.peers:
            mac, how = self._resolve_mac(peer, arp_deadline)
            self.next_hop_macs[peer] = {"mac": mac, "source": how}
            self.connect(peer, mac)
        self.barrier("start")
        self.timing["start_barrier_s"] = round(self.now() - self.t0, 6)

    def connect(self, peer, mac):
        """One connection per channel to `peer`, each with the job's QPs (QP scaling)."""
        job = self.job
        for ch in range(job.channels):
            conn = Connection(peer, ch, job.ranks[peer].ip, mac, job.cts)
            for q in range(job.qps_per_connection):
                local = job.qpn(peer, ch, q)
                remote = job.qpn(self.rank, ch, q)
                conn.qps.append(self.nic.create_qp(local, remote, conn.peer_ip, mac, context=conn))
            self.conns[(peer, ch)] = conn

    # -- the loop --------------------------------------------------------------------------------
    def _turn(self):
        if self.now() > self.deadline:
            raise RunTimeout(f"timed out after {self.job.timeout_s} s")
        self.nic.poll(0.002)
        self.ctrl.poll()
        errors = self.nic.errors()
        if errors:
            raise RunFailed("; ".join(errors))

    def barrier(self, label):
        epoch = self._epoch
        self._epoch += 1
        while not self.ctrl.passed(epoch):
            self.ctrl.arrive(epoch, self.now())
            self._turn()
        self.log(f"rank {self.rank}: barrier {label} passed")

    # -- CTS ------------------------------------------------------------------------------------
    # Two modes. Per connection (no cts.budget_bytes): each (peer, channel) may have one buffer
    # of credit beyond what the host consumed, so N senders may have N buffers in flight.
    # Receiver-wide (cts.budget_bytes = B): all credit granted and not yet consumed stays <= B,
    # handed out one chunk at a time to the connections that wait, in turn (B / chunk senders
    # at a time), and only for phases this rank has started (credit held for a later phase
    # could starve the sender this phase waits for).
    def _credit_limit(self, conn):
        cap = conn.recv_released if self.job.cts_budget_bytes else conn.recv_planned
        return min(conn.consumed + self.job.cts_buffer_bytes, cap)

    def _grant(self, conn, force=False):
        """Per-connection credit; `force` re-sends the current grant (CTS is unacknowledged)."""
        new = self._credit_limit(conn)
        if new > conn.granted_sent and (force or new - conn.granted_sent >= self.job.chunk_bytes
                                         or new == conn.recv_planned):
            conn.granted_sent = new
            self.nic.send_cts(conn.peer_ip, conn.peer_mac, self.rank, conn.channel, new)
        elif force and conn.granted_sent > conn.recv_cum:
            self.nic.send_cts(conn.peer_ip, conn.peer_mac, self.rank, conn.channel, conn.granted_sent)

    def _admit(self):
        """Receiver-wide budget: grant waiting connections a chunk each, round robin, while it lasts."""
        order = list(self.conns.values())
        chunk = self.job.chunk_bytes
        free = self.job.cts_budget_bytes - self._credit_out
        start = self._admit_next
        for i in range(len(order)):
            if free <= 0:
                return
            idx = (start + i) % len(order)
            conn = order[idx]
            want = self._credit_limit(conn) - conn.granted_sent
            if want <= 0:
                continue
            step = min(want, chunk, free)
            if step < min(want, chunk):
                return                     # wait until a whole chunk (or the rest) fits
            conn.granted_sent += step
            self._credit_out += step
            free -= step
            self._admit_next = idx + 1
            self.nic.send_cts(conn.peer_ip, conn.peer_mac, self.rank, conn.channel, conn.granted_sent)

    def _on_rx_bytes(self, qp, nbytes):
        self._progress = True
        conn = qp.context
        conn.recv_cum += nbytes
        conn.last_rx = self.now()

    def _on_rx_consumed(self, qp, nbytes):
        self._progress = True
        conn = qp.context
        conn.consumed += nbytes
        if not self.job.cts:
            return
        if self.job.cts_budget_bytes:
            self._credit_out -= nbytes
            self._admit()
        else:
            self._grant(conn)

    def _on_cts(self, _src_ip, src_rank, channel, granted):
        conn = self.conns.get((src_rank, channel))
        if conn is None:
            return
        if granted > conn.granted:
            conn.granted = granted
            self._progress = True
            self._pump(conn)

    def _refresh_cts(self, now):
        """Re-send grants a sender may have lost (CTS is unacknowledged)."""
        if now < self._cts_check:
            return
        self._cts_check = now + self.job.cts_refresh_s
        if self.job.cts_budget_bytes:
            self._admit()
        for conn in self.conns.values():
            if conn.consumed < conn.recv_planned and now - conn.last_rx > self.job.cts_refresh_s:
                if not self.job.cts_budget_bytes:
                    self._grant(conn, force=True)
                elif conn.granted_sent > conn.recv_cum:
                    self.nic.send_cts(conn.peer_ip, conn.peer_mac, self.rank, conn.channel, conn.granted_sent)

    # -- sending ---------------------------------------------------------------------------------
    def _on_write_done(self, qp, msg):
        self._progress = True
        qp.context.acked += msg.nbytes

    def _pump(self, conn):
        limit = min(conn.send_target, conn.granted)
        if conn.posted >= limit or self._msg_size is None:
            return          # nothing released yet (a CTS may arrive before this rank planned)
        chunk = self._msg_size
        nqps = len(conn.qps)
        while conn.posted < limit:
            # a message never crosses the end of a phase's send (it carries that phase's immediate)
            stop = min((m for m in conn.imm_at if m > conn.posted), default=limit)
            size = min(chunk, limit - conn.posted, stop - conn.posted)
            end = conn.posted + size
            imm = conn.imm_at.pop(end, None)
            if self.job.qp_spread == "split" and nqps > 1 and size >= nqps:
                parts = collectives.split_evenly(size, nqps)
                for i, (qp, part) in enumerate(zip(conn.qps, parts)):
                    self.nic.post_write(qp, part, imm=imm if i == nqps - 1 else None, on_done=self._on_write_done)
            else:
                qp = conn.qps[conn.rr % nqps]
                conn.rr += 1
                self.nic.post_write(qp, size, imm=imm, on_done=self._on_write_done)
            conn.posted = end

    # -- phases ----------------------------------------------------------------------------------
    def _plan(self, size):
        job = self.job
        if job.pattern == "stream":
            # perftest semantics: `size` is the message size, `iterations` messages back to back.
            per_channel = collectives.split_evenly(size * job.iterations, job.channels)
            self._msg_size = min(size, job.cts_buffer_bytes) if job.cts else size
            repeats = 1
        else:
            per_channel = collectives.split_evenly(size, job.channels)
            self._msg_size = job.chunk_bytes
            repeats = job.warmup + job.iterations
        runs = []
        for ch in range(job.channels):
            one = collectives.schedule(job.pattern, self.rank, job.n, per_channel[ch], job.chunk_bytes,
                                       job.alltoallv_weights, job.preset)
            phases = []
            for it in range(repeats):
                for ph in one:
                    sends, recvs = [], []
                    for peer, nbytes in ph.sends:
                        conn = self.conns[(peer, ch)]
                        conn.send_planned += nbytes
                        sends.append((conn, conn.send_planned, nbytes, len(phases)))
                    for peer, nbytes in ph.recvs:
                        conn = self.conns[(peer, ch)]
                        conn.recv_planned += nbytes
                        recvs.append((conn, conn.recv_planned, nbytes))
                    phases.append((sends, recvs))
            runs.append(ChannelRun(ch, phases, len(one)))
        return runs

    def _start_phase(self, run):
        sends, recvs = run.phases[run.idx]
        for conn, mark, _ in recvs:
            conn.recv_released = mark
        if self.job.cts and self.job.cts_budget_bytes:
            self._admit()
        for conn, mark, nbytes, phase_no in sends:
            self._release(conn, mark, nbytes, phase_no)

    def _release(self, conn, mark, nbytes, phase_no, fraction=1.0):
        """Let the first `fraction` of a phase's send to `conn` (ending at `mark`) go out."""
        if mark > conn.posted:
            conn.imm_at[mark] = phase_no & 0xFFFFFFFF
        start = mark - nbytes
        ready = nbytes if fraction >= 1.0 else int(fraction * nbytes) // self.job.chunk_bytes * self.job.chunk_bytes
        if start + ready > conn.send_target:
            conn.send_target = start + ready
            self._pump(conn)

    def _complete(self, run, idx):
        sends, recvs = run.phases[idx]
        if any(conn.consumed < mark for conn, mark, _ in recvs):
            return False
        if not self.job.slicing:
            return all(conn.acked >= mark for conn, mark, _, _ in sends)
        if idx < len(run.phases) - 1:
            # NCCL moves on once a step's data is out; only the last step waits for ACKs
            return all(conn.posted >= mark for conn, mark, _, _ in sends)
        # ... for everything the channel sent, also in earlier phases (a tree leaf ends receiving)
        return all(c.acked >= c.send_planned for c in self.conns.values() if c.channel == run.channel)

    def _release_ahead(self, run):
        """Pipelining: the next phase's sends go out chunk by chunk as this phase's data arrives
        (in a ring, step k+1 forwards what step k received: NCCL's slices)."""
        recvs = run.phases[run.idx][1]
        if not recvs or run.idx + 1 >= len(run.phases):
            return
        arrived = min(max(0, conn.consumed - (mark - nbytes)) / max(nbytes, 1) for conn, mark, nbytes in recvs)
        for conn, mark, nbytes, phase_no in run.phases[run.idx + 1][0]:
            self._release(conn, mark, nbytes, phase_no, arrived)

    def _advance(self, run, now):
        while not run.done:
            if run.idx >= 0:
                if not self._complete(run, run.idx):
                    if self.job.slicing:
                        self._release_ahead(run)
                    return
                if (run.idx + 1) % run.per_iter == 0:
                    run.iter_end[(run.idx + 1) // run.per_iter - 1] = now
            run.idx += 1
            if not run.done:
                self._start_phase(run)

    def run_size(self, size):
        job = self.job
        runs = self._plan(size)
        start = self.now()
        if job.cts:
            for conn in self.conns.values():
                conn.last_rx = start
                if not job.cts_budget_bytes:
                    self._grant(conn, force=True)
        self._progress = False
        for run in runs:
            self._advance(run, start)
        finished = all(r.done for r in runs)
        while not finished:
            self._turn()
            now = self.now()
            # Phases move only on what the NIC reported (payload in, ACKs, CTS): a turn
            # without any leaves them where they are, so they are not looked at again.
            if self._progress:
                self._progress = False
                for run in runs:
                    self._advance(run, now)
                finished = all(r.done for r in runs)
            if job.cts:
                self._refresh_cts(now)
        end = self.now()
        return self._row(size, runs, start, end)

    # -- results ---------------------------------------------------------------------------------
    def _row(self, size, runs, start, end):
        job = self.job
        if job.pattern == "stream":
            iters, t_begin = job.iterations, start
        else:
            iters = job.iterations
            t_begin = start
            if job.warmup:
                t_begin = max((r.iter_end.get(job.warmup - 1, start) for r in runs), default=start)
        elapsed = max(end - t_begin, 1e-9)
        per_iter = elapsed / iters
        nbytes = size if job.pattern != "stream" else size
        algbw = nbytes / per_iter / 1e9
        row = {"size": size, "count": size // 4, "type": "float",
               "redop": "sum" if job.pattern in collectives.REDUCING else "none",
               "root": 0 if job.pattern in ("incast", "tree_allreduce") else -1,
               "time_us": round(per_iter * 1e6, 2), "algbw_GBps": round(algbw, 6),
               "busbw_GBps": round(algbw * collectives.BUSBW_FACTOR[job.pattern](job.n), 6),
               "iterations": iters, "warmup": job.warmup if job.pattern != "stream" else 0}
        if job.pattern == "stream":
            total = size * job.iterations
            self.perftest.append({"bytes": size, "iterations": job.iterations,
                                  "bw_avg_Gbps": round(total * 8 / elapsed / 1e9, 6),
                                  "bw_avg_MBps": round(total / elapsed / 2**20, 3),
                                  "msg_rate_Mpps": round(job.iterations / elapsed / 1e6, 6),
                                  "role": "sender" if self.rank % 2 == 0 else "receiver"})
        return row

    def run(self):
        """Set up, run every size, meet at the final barrier; returns the report dict."""
        try:
            self.setup()
            for size in self.job.sizes:
                self.results.append(self.run_size(size))
                self.barrier(f"after size {size}")
            self.timing["total_s"] = round(self.now() - self.t0, 6)
            self._linger()
        except RunTimeout as exc:
            self.status, self.error = "timeout", str(exc)
        except (RunFailed, OSError, ValueError) as exc:
            self.status, self.error = "error", _message(exc)
        except KeyboardInterrupt:
            self.status, self.error = "interrupted", "interrupted by a signal"
        finally:
            report = self.report()
            self.close()
        return report

    def _linger(self):
        """Keep answering (ACKs, a lost barrier "go") briefly, so peers can finish too: for
        LINGER_S, or the host's own `linger_s` (virtual time: a few of the fabric's RTTs)."""
        until = min(self.deadline, self.now() + getattr(self.io, "linger_s", LINGER_S))
        while True:
            left = until - self.now()
            if left <= 0:
                return
            self.nic.poll(min(LINGER_POLL_S, left))
            self.ctrl.poll()

    def expected_bytes(self):
        tx = sum(c.send_planned for c in self.conns.values())
        rx = sum(c.recv_planned for c in self.conns.values())
        return tx, rx

    def report(self):
        from traffic.report import rank_report
        return rank_report(self)

    def close(self):
        for part in (self.nic, self.ctrl):
            if part:
                part.close()
