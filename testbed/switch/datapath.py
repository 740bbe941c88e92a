"""The switch's data path: one thread running a time-ordered event loop.

RX on every port (poll on raw sockets) -> port MAC (PFC frames consumed here)
-> Pipeline.ingress -> traffic manager (the shared buffer charged per ingress
priority group, with lossless headroom; per port: 8 strict-priority queues,
shaped rate, pause state, PFC watchdog) -> Pipeline.egress at dequeue -> the
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
from testbed.switch.buffers import (PG_PROFILE_TABLE, WATCHDOG_DETECT_S, BufferConfigError, PgProfile,
                                    auto_watchdog_detect_s)
from testbed.switch.looplag import LagHistogram
from testbed.switch.traffic_manager import (CATCH_UP_SECONDS, BufferAccount, DelayLine, EgressPort,
                                            NUM_PRIORITIES, PFC_REFERENCE_BPS)

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

    def __init__(self, ports, cpu_port=None, captures=None, log=None, clock=time.perf_counter,
                 buffer_config=None, catch_up=CATCH_UP_SECONDS):
        self.ports = dict(ports)
        self.cpu_port = cpu_port
        self.captures = captures
        self.log = log
        self.clock = clock
        self.t0 = clock()
        self.lock = threading.RLock()
        self.pipeline = None
        self.rng = None                     # random.Random for the P4 `random` extern (None: global)
        self.egress_ports = {n: EgressPort(n, catch_up=catch_up) for n in self.ports}
        if cpu_port is not None and cpu_port not in self.egress_ports:
            self.egress_ports[cpu_port] = EgressPort(cpu_port, catch_up=catch_up)
        self.counters = {n: PortCounters() for n in self.egress_ports}
        self.buffer = BufferAccount([n for n in self.ports if n != cpu_port], buffer_config)
        self.loop_lag = LagHistogram()       # how late the real-time loop ran (run())
        self.notice = None                  # callable(str) for rare events (watchdog)
        self._watched = set()               # egress ports with a pause in progress or a storm
        self.delay_line = DelayLine()
        self.pause_refresh = pfc.PauseRefresh()   # the MAC keeps an XOFF up until an XON lifts it
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
        self.wake_hook = None               # callable() instead of the pipe, when something other
                                            # than run() drives the data path (virtual time)
        self.idle_sweep = None              # (interval_s, callable()): the P4Runtime server's
                                            # idle-timeout sweep, run by run() on this clock

    # -- control (any thread) -------------------------------------------------
    def now_us(self):
        return int((self.clock() - self.t0) * 1_000_000)

    def set_pipeline(self, pipeline):
        """Swap in a new pipeline; queued packets of the old one are discarded."""
        with self.lock:
            for port in self.egress_ports.values():
                for nbytes, charge in port.clear():
                    if charge is not None:
                        self.buffer.release(charge, nbytes)
            self._busy.clear()
            self.pipeline = pipeline
            self.sync_pg_profiles()
        self._wake()

    def sync_pg_profiles(self):
        """Take the lossless PG profiles from the program's PG_PROFILE_TABLE (entries keyed by
        priority, action parameters xoff, xon, headroom, reserved in bytes): the PFC knobs
        written over P4Runtime configure the buffer too. A program without it: all lossy.
        Returns an error text when the profiles do not fit the buffer (the old ones stay)."""
        table = (getattr(self.pipeline, "tables", None) or {}).get(PG_PROFILE_TABLE)
        profiles = {}
        if table is not None:
            for entry in table.entries():
                args = getattr(entry.action, "args", None) or {}
                if not entry.keys or not {"xoff", "xon", "headroom"} <= set(args):
                    continue
                prio = getattr(entry.keys[0], "value", None)
                if isinstance(prio, int) and 0 <= prio < NUM_PRIORITIES:
                    profiles[prio] = PgProfile(xoff=args["xoff"], xon=args["xon"], headroom=args["headroom"],
                                               reserved=args.get("reserved", 0), lossless=True)
        with self.lock:
            try:
                self.buffer.set_profiles(profiles)
            except BufferConfigError as exc:
                self.last_error = f"PG profiles of {PG_PROFILE_TABLE} not applied: {exc}"
                if self.notice:
                    self.notice(self.last_error)
                return self.last_error
        return None

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
        if self.wake_hook is not None:
            self.wake_hook()
            return
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
        next_sweep = None
        wake_at = None
        lag = self.loop_lag
        while not self._stop.is_set():
            now = clock()
            if wake_at is not None and now > wake_at:
                lag.add(now - wake_at)       # ran late: everything due waited this long
            wake_at = self._service(now)
            if self.captures and now >= next_flush:
                self.captures.flush()
                next_flush = now + PCAP_FLUSH_SECONDS
            sweep = self.idle_sweep
            if sweep is None:
                next_sweep = None
            else:
                if next_sweep is None:
                    next_sweep = now + sweep[0]
                elif now >= next_sweep:
                    sweep[1]()
                    next_sweep += sweep[0]       # a fixed period, as BMv2's ager (none made up)
                    if next_sweep <= now:
                        next_sweep = now + sweep[0]
                if wake_at is None or next_sweep < wake_at:
                    wake_at = next_sweep
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
            self._enqueue(job, now_us, number)

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
        if acted:
            self._watched.add(number)
        if self.log:
            self.log(f"[port {number}] PFC received {entries}; pausing/resuming priorities {acted}")
        return True

    def _enqueue(self, job, now_us, in_port=None):
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
        # the buffer first: charged to the ingress PG (= priority) and the egress queue
        nbytes = job.packet_length
        charge = self.buffer.admit(in_port, prio, nbytes, port.queue_bytes[prio])
        if charge is None:
            lossless = in_port is not None and self.buffer.lossless(prio)
            if not lossless:
                port.tail_drops[prio] += 1
            if self.log:
                self.log(f"port {in_port} PG {prio} headroom exhausted: lossless packet dropped" if lossless
                         else f"egress port {out} queue {prio} over its buffer threshold: tail drop")
            return
        depth = port.enqueue(job, prio, now_us, nbytes, charge,
                             lossless=in_port is not None and self.buffer.lossless(prio))
        if self.log:
            if depth < 0:
                self.log(f"egress port {out} queue {prio} full: tail drop")
            else:
                self.log(f"enqueued on egress port {out} queue {prio} (depth {depth})")
        if depth >= 0:
            self._busy.add(out)
        else:
            self.buffer.release(charge, nbytes)

    def counters_for_drop(self):
        # Drops with no valid egress port are charged to a catch-all counter set.
        counters = self.counters.get(-1)
        if counters is None:
            counters = self.counters[-1] = PortCounters()
        return counters

    def _service(self, now):
        """Dequeue what each port may send now, release due frames; returns the next wake time."""
        wake = None
        if self._watched:
            detect = self.watchdog_detect_s()
            with self.lock:
                if detect:
                    wake = self._watchdog(now, detect)
                else:
                    self._watchdog_off(now)
        if self._busy:
            with self.lock:
                due = self._service_queues(now)
            if due is not None and (wake is None or due < wake):
                wake = due
        if self.delay_line:
            for number, frame in self.delay_line.pop_due(self.clock()):
                self._transmit(number, frame)
            due = self.delay_line.next_time()
            if due is not None and (wake is None or due < wake):
                wake = due
        if self.pause_refresh:
            for number, frame in self.pause_refresh.due_frames(now):
                if not self._transmit(number, frame):
                    self.pause_refresh.forget(number)     # the link is gone: nothing stands
            due = self.pause_refresh.next_due()
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
                job, enq_ts, enq_depth, nbytes, charge = port.pop(prio)
                if charge is not None:
                    self.buffer.release(charge, nbytes)
                now_us = int((now - t0) * 1_000_000)
                try:
                    tx, more = pipeline.egress(job, now_us, enq_ts, enq_depth,
                                               now_us - enq_ts, len(port.queues[prio]))
                except Exception as exc:
                    self._pipeline_fault("egress", number, exc)
                    continue
                if port.stormed[prio] and self.buffer.config.watchdog_action == "drop":
                    # the PFC watchdog drops what a stormed queue holds; it still went through
                    # egress, so the program's per-PG byte counts stay right
                    port.storm_drops[prio] += 1
                    tx = ()
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

    def watchdog_detect_s(self):
        """The PFC watchdog's detection time: as configured, or "auto" (buffers.py): 200 ms or
        twice the longest pause this switch's PGs can legitimately cause, at its slowest port
        shared by all the others."""
        detect = self.buffer.config.watchdog_detect_s
        if detect is not None:
            return detect
        rates = [p.rate_bps for n, p in self.egress_ports.items() if n != self.cpu_port and p.rate_bps]
        if not rates:
            return WATCHDOG_DETECT_S
        return auto_watchdog_detect_s(self.buffer.profiles, max(1, len(rates) - 1), min(rates))

    def _watchdog(self, now, detect_s):
        """The PFC watchdog of every port with a pause in progress; returns its next wake."""
        config = self.buffer.config
        wake = None
        for number in list(self._watched):
            port = self.egress_ports[number]
            events, due = port.watchdog(now, detect_s, config.watchdog_restore_s)
            for prio, what in events:
                if what == "stormed":
                    self._busy.add(number)       # its queue is served again, paused or not
                self._notify(f"PFC watchdog: port {number} priority {prio} {what} at "
                             f"{now - self.t0:.3f} s" + (f" (paused for {detect_s * 1e3:g} ms; "
                                                         f"{config.watchdog_action} its packets)"
                                                         if what == "stormed" else ""))
            if due is None and not port.watching():
                self._watched.discard(number)
            elif due is not None and (wake is None or due < wake):
                wake = due
        return wake

    def _watchdog_off(self, now):
        """A watchdog turned off leaves no queue stormed (it would ignore pauses for good)."""
        for number in list(self._watched):
            port = self.egress_ports[number]
            for prio in port.release_storms(now):
                self._notify(f"PFC watchdog: port {number} priority {prio} restored at {now - self.t0:.3f} s "
                             "(watchdog off)")
            if not port.watching():
                self._watched.discard(number)

    def _notify(self, message):
        for sink in (self.notice, self.log):
            if sink:
                sink(message)

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
            return True
        if self.ports[number].send(frame) is False:
            counters.tx_refused += 1   # the kernel refused it (EMSGSIZE, full buffer, link down): a drop
            if self.log:
                self.log(f"port {number}: frame of {len(frame)} B refused by the interface: dropped")
            return False
        counters.tx_packets += 1
        counters.tx_bytes += len(frame)
        if self.captures and number in self.captures.egress:
            self.captures.egress[number].write(frame)
        if frame[12] == 0x88 and frame[13] == 0x08 and frame[12:16] == pfc.PFC_SIGNATURE:   # no slice per packet
            port = self.egress_ports[number]
            self.pause_refresh.transmitted(number, frame, port.rate_bps or PFC_REFERENCE_BPS, self.clock())
        return True

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
            "queue_bytes": list(port.queue_bytes),
            "max_queue_bytes": list(port.max_queue_bytes),
            "watchdog_storms": list(port.storms),
            "watchdog_drops": list(port.storm_drops),
            "watchdog_stormed": [p for p in range(NUM_PRIORITIES) if port.stormed[p]],
            "pfc_refresh_tx": list(self.pause_refresh.sent.get(number, [0] * NUM_PRIORITIES)),
            **self.buffer.port_state(number),
            **counters,
        }

    def buffer_status(self):
        """The buffer, its profiles and watchdog, and the loop's measured lag."""
        with self.lock:
            status = self.buffer.status()
            status["watchdog"]["detect_s"] = self.watchdog_detect_s()
            status["watchdog"]["auto"] = self.buffer.config.watchdog_detect_s is None
            return {**status, "loop_lag": self.loop_lag.summary()}

    def reset_watermarks(self):
        """Restart the high-water marks (PG bytes, queue bytes) and the loop lag statistics."""
        with self.lock:
            self.buffer.reset_watermarks()
            for port in self.egress_ports.values():
                port.max_queue_bytes = list(port.queue_bytes)
            self.loop_lag.reset()
