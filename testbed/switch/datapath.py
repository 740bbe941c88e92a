"""The switch's data path: one thread running a time-ordered event loop.

RX on every port (poll on raw sockets) -> port MAC (PFC frames consumed here)
-> Pipeline.ingress -> traffic manager (per port: 8 strict-priority queues,
depth limits, shaped rate, pause state) -> Pipeline.egress at dequeue -> the
wire (delay, jitter, loss) -> TX. Packet-out from the controller enters as if
received on the CPU port; what egresses to the CPU port goes to
`packet_in_handler`.

Everything touching the pipeline runs under `self.lock`, which the P4Runtime
server also takes for its writes.
"""
from collections import deque
import os
import select
import threading
import time

from testbed.switch import pfc
from testbed.switch.traffic_manager import DelayLine, EgressPort, NUM_PRIORITIES

RX_BATCH = 64           # frames read from one port before looking at the others
MIN_ETHERNET = 14       # shorter frames are runts: the MAC discards them
IDLE_WAKE_SECONDS = 0.5
PCAP_FLUSH_SECONDS = 1.0
MAX_INJECTED = 4096     # packet-outs waiting for the data path; more are refused (a flood cannot grow memory)


class PortCounters:
    __slots__ = ("rx_packets", "rx_bytes", "tx_packets", "tx_bytes", "rx_runts",
                 "pfc_consumed", "no_route_drops", "priority_drops", "tx_refused")

    def __init__(self):
        for name in self.__slots__:
            setattr(self, name, 0)

    def as_dict(self):
        return {name: getattr(self, name) for name in self.__slots__}


class Switch:
    """A software switch around a Pipeline (see testbed/p4engine/CONTRACT.md).

    ports: {port_number: RawPort-like object with .fd, .recv(n), .send(bytes), .iface}
    """

    def __init__(self, ports, cpu_port=None, captures=None, log=None, clock=time.perf_counter):
        self.ports = dict(ports)
        self.cpu_port = cpu_port
        self.captures = captures
        self.log = log
        self.clock = clock
        self.t0 = clock()
        self.lock = threading.RLock()
        self.pipeline = None
        self.egress_ports = {n: EgressPort(n) for n in self.ports}
        if cpu_port is not None and cpu_port not in self.egress_ports:
            self.egress_ports[cpu_port] = EgressPort(cpu_port)
        self.counters = {n: PortCounters() for n in self.egress_ports}
        self.delay_line = DelayLine()
        self.packet_in_handler = None       # callable(frame) for frames egressing to the CPU port
        self.pipeline_errors = 0
        self.last_error = None
        self._busy = set()                  # egress ports with queued packets
        self._injected = deque()            # (port, frame) from other threads
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._stop = threading.Event()
        self._thread = None
        self.failure = None                 # why the data-path thread died (None while it runs)
        self.on_failure = None              # callable(reason), called from the dying thread

    # -- control (any thread) -------------------------------------------------
    def now_us(self):
        return int((self.clock() - self.t0) * 1_000_000)

    def set_pipeline(self, pipeline):
        """Swap in a new pipeline; queued packets of the old one are discarded."""
        with self.lock:
            for port in self.egress_ports.values():
                port.clear()
            self._busy.clear()
            self.pipeline = pipeline
        self._wake()

    def inject(self, port, frame):
        """Process `frame` as if it arrived on `port` (packet-out uses the CPU port); False (the
        frame dropped) when MAX_INJECTED frames are already waiting."""
        if len(self._injected) >= MAX_INJECTED:
            return False
        self._injected.append((port, bytes(frame)))
        self._wake()
        return True

    def egress_port(self, number):
        try:
            return self.egress_ports[number]
        except KeyError:
            raise ValueError(f"switch has no port {number} (ports: {sorted(self.egress_ports)})") from None

    def start(self):
        self._thread = threading.Thread(target=self.run, name="switch-datapath", daemon=True)
        self._thread.start()

    def stop(self, timeout=5.0):
        self._stop.set()
        self._wake()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def close(self):
        self.stop()
        for port in self.ports.values():
            port.close()
        if self.captures:
            self.captures.close()
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass

    def _wake(self):
        try:
            os.write(self._wake_w, b"x")
        except (BlockingIOError, OSError):
            pass   # already awake or closing

    # -- the loop --------------------------------------------------------------
    def run(self):
        """The data-path loop. If it dies, the reason is kept in `failure` and handed to
        `on_failure`, whose job is to take the switch down: a switch that answers its
        control plane but forwards nothing must not exist."""
        try:
            self._loop()
        except BaseException as exc:
            import traceback
            where = traceback.extract_tb(exc.__traceback__)[-1]
            self.failure = (f"{type(exc).__name__}: {exc} (at {os.path.basename(where.filename)}:"
                            f"{where.lineno} in {where.name})")
            self.last_error = f"data path died: {self.failure}"
            if self.log:
                self.log(f"data path died: {self.failure}")
            if self.on_failure is not None:
                self.on_failure(self.failure)

    def _loop(self):
        poller = select.poll()
        by_fd = {}
        for number, port in self.ports.items():
            poller.register(port.fd, select.POLLIN)
            by_fd[port.fd] = number
        poller.register(self._wake_r, select.POLLIN)
        clock = self.clock
        next_flush = clock() + PCAP_FLUSH_SECONDS
        while not self._stop.is_set():
            now = clock()
            wake_at = self._service(now)
            if self.captures and now >= next_flush:
                self.captures.flush()
                next_flush = now + PCAP_FLUSH_SECONDS
            # at most IDLE_WAKE_SECONDS: a far (or non-finite) wake time never overflows poll()
            timeout = IDLE_WAKE_SECONDS if wake_at is None else min(IDLE_WAKE_SECONDS, max(0.0, wake_at - clock()))
            events = poller.poll(timeout * 1000.0)
            for fd, _mask in events:
                if fd == self._wake_r:
                    try:
                        os.read(self._wake_r, 4096)
                    except BlockingIOError:
                        pass
                    continue
                self._drain_port(by_fd[fd])
            if self._injected:
                with self.lock:     # only what is queued now: a flood cannot keep the lock
                    for _ in range(len(self._injected)):
                        port, frame = self._injected.popleft()
                        self._receive(port, frame, clock())
        if self.captures:
            self.captures.flush()

    def _drain_port(self, number):
        recv = self.ports[number].recv
        clock = self.clock
        with self.lock:
            for _ in range(RX_BATCH):
                try:
                    frame = recv(65536)
                except (BlockingIOError, InterruptedError):
                    return
                except OSError as exc:
                    self.last_error = f"port {number}: receive failed: {exc}"
                    return
                self._receive(number, frame, clock())

    def _receive(self, number, frame, now):
        """The port MAC, then the ingress pipeline, then the queues (caller holds self.lock)."""
        counters = self.counters[number]
        counters.rx_packets += 1
        counters.rx_bytes += len(frame)
        if self.captures and number in self.captures.ingress:
            self.captures.ingress[number].write(frame)
        if len(frame) < MIN_ETHERNET:
            counters.rx_runts += 1
            return
        if frame[12] == 0x88 and frame[13] == 0x08 and self._mac_control(number, frame, now):
            return
        pipeline = self.pipeline
        if pipeline is None:
            return
        now_us = int((now - self.t0) * 1_000_000)
        try:
            jobs = pipeline.ingress(number, frame, now_us)
        except Exception as exc:   # a pipeline fault must not stop the switch
            self._pipeline_fault("ingress", number, exc)
            return
        for job in jobs:
            self._enqueue(job, now_us)

    def _mac_control(self, number, frame, now):
        """Consume a PFC frame on a PFC-enabled port; True if consumed."""
        port = self.egress_ports.get(number)
        if port is None or not port.pfc_enabled or not pfc.is_pfc(frame):
            return False
        counters = self.counters[number]
        counters.pfc_consumed += 1
        try:
            entries = pfc.decode_pfc(frame)
        except ValueError:
            return True   # a truncated PFC frame is still a MAC control frame: swallowed
        acted = port.apply_pfc(entries, now)
        if self.log:
            self.log(f"[port {number}] PFC received {entries}; pausing/resuming priorities {acted}")
        return True

    def _enqueue(self, job, now_us):
        out = job.egress_port
        port = self.egress_ports.get(out)
        if port is None:
            self.counters_for_drop().no_route_drops += 1
            if self.log:
                self.log(f"egress port {out} does not exist: packet dropped")
            return
        prio = job.priority
        if not 0 <= prio < NUM_PRIORITIES:
            self.counters[out].priority_drops += 1
            if self.log:
                self.log(f"priority {prio} is not a queue (0..7): packet dropped")
            return
        depth = port.enqueue(job, prio, now_us)
        if self.log:
            if depth < 0:
                self.log(f"egress port {out} queue {prio} full: tail drop")
            else:
                self.log(f"enqueued on egress port {out} queue {prio} (depth {depth})")
        if depth >= 0:
            self._busy.add(out)

    def counters_for_drop(self):
        # Drops with no valid egress port are charged to a catch-all counter set.
        counters = self.counters.get(-1)
        if counters is None:
            counters = self.counters[-1] = PortCounters()
        return counters

    def _service(self, now):
        """Dequeue what each port may send now, release due frames; returns the next wake time."""
        wake = None
        if self._busy:
            with self.lock:
                wake = self._service_queues(now)
        if self.delay_line:
            for number, frame in self.delay_line.pop_due(self.clock()):
                self._transmit(number, frame)
            due = self.delay_line.next_time()
            if due is not None and (wake is None or due < wake):
                wake = due
        return wake

    def _service_queues(self, now):
        wake = None
        pipeline = self.pipeline
        t0 = self.t0
        for number in list(self._busy):
            port = self.egress_ports[number]
            while port.backlog:
                prio, when = port.next_eligible(now)
                if prio is None:
                    if when is not None and (wake is None or when < wake):
                        wake = when
                    break
                job, enq_ts, enq_depth = port.dequeue(prio)
                now_us = int((now - t0) * 1_000_000)
                try:
                    tx, more = pipeline.egress(job, now_us, enq_ts, enq_depth,
                                               now_us - enq_ts, len(port.queues[prio]))
                except Exception as exc:
                    self._pipeline_fault("egress", number, exc)
                    continue
                sent = 0
                for out, frame in tx:
                    sent += len(frame)
                    self._to_wire(out, frame, now)
                port.occupy_link(sent, now)
                for extra in more:
                    self._enqueue(extra, now_us)
            if not port.backlog:
                self._busy.discard(number)
        return wake

    def _to_wire(self, number, frame, now):
        port = self.egress_ports.get(number)
        if port is None:
            self.counters_for_drop().no_route_drops += 1
            return
        delay = port.wire_delay()
        if delay is None:
            return
        if delay:
            self.delay_line.push(now + delay, number, frame)
        else:
            self._transmit(number, frame)

    def _transmit(self, number, frame):
        counters = self.counters[number]
        if number == self.cpu_port and number not in self.ports:
            counters.tx_packets += 1
            counters.tx_bytes += len(frame)
            handler = self.packet_in_handler
            if handler is not None:
                try:
                    handler(frame)
                except Exception as exc:   # a controller-side fault must not stop the switch
                    self.last_error = f"packet-in handler: {type(exc).__name__}: {exc}"
            return
        if self.ports[number].send(frame) is False:
            counters.tx_refused += 1   # the kernel refused it (EMSGSIZE, full buffer, link down): a drop
            if self.log:
                self.log(f"port {number}: frame of {len(frame)} B refused by the interface: dropped")
            return
        counters.tx_packets += 1
        counters.tx_bytes += len(frame)
        if self.captures and number in self.captures.egress:
            self.captures.egress[number].write(frame)

    def _pipeline_fault(self, stage, port, exc):
        self.pipeline_errors += 1
        self.last_error = f"{stage} on port {port}: {type(exc).__name__}: {exc}"
        if self.log:
            self.log(f"pipeline error ({self.last_error}); packet dropped")

    # -- state for the agent ----------------------------------------------------
    def port_status(self, number):
        port = self.egress_port(number)
        now = self.clock()
        counters = self.counters.get(number, PortCounters()).as_dict()
        return {
            "port": number,
            "rate_bps": port.rate_bps,
            "queue_depth": [port.depth(p) for p in range(NUM_PRIORITIES)],
            "queue_limit": list(port.depth_limit),
            "tail_drops": list(port.tail_drops),
            "enqueued": list(port.enqueued),
            "pfc_enabled": [p for p in range(NUM_PRIORITIES) if port.pfc_enabled & (1 << p)],
            "pfc_frames": port.pfc_frames,
            "pfc_rx": list(port.pfc_rx),
            "paused_us": [round(port.paused_time(p, now) * 1e6) for p in range(NUM_PRIORITIES)],
            "pause_remaining_us": [round(port.pause_remaining(p, now) * 1e6) for p in range(NUM_PRIORITIES)],
            "delay_us": port.delay * 1e6, "jitter_us": port.jitter * 1e6, "loss": port.loss,
            "loss_drops": port.loss_drops,
            **counters,
        }
