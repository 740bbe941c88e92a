"""The fabric's nodes on the simulated clock.

:class:`SimSwitch` is the engine target's own :class:`~testbed.switch.datapath.Switch` (P4
pipeline, traffic manager, PFC MAC) with wires for ports, serviced by scheduler events instead
of its poll loop, and its P4Runtime server in this process. :class:`SimHost` gives a rank runner
(traffic/runner.py, unchanged) a NIC port on a wire, a datagram socket for the ranks' barrier,
and a `wait` that yields to the scheduler.
"""
from collections import deque
import random
import struct

from testbed.net import agents
from testbed.switch.agent import EngineAgent
from testbed.switch.datapath import PortCounters, Switch
from testbed.switch.traffic_manager import NUM_PRIORITIES

ETH_IPV4 = b"\x08\x00"
ETH_MAC_CONTROL = b"\x88\x08"
ROCE_PORT = struct.pack("!H", 4791)


class SwitchPort:
    """What the Switch sends on: a wire instead of a raw socket."""

    fd = -1

    def __init__(self, number, iface):
        self.number = number
        self.iface = iface
        self.wire = None          # set when the link is cabled
        self.tx_errors = 0

    def send(self, frame):
        if self.wire is None or not self.wire.send(frame):
            self.tx_errors += 1
            return False
        return True

    def close(self):
        pass


class SimSwitch:
    """One P4 switch of the fabric, driven by the scheduler."""

    def __init__(self, scheduler, clos_switch, cpu_port, captures=None, seed=0, buffer_config=None):
        self.scheduler = scheduler
        self.name = clos_switch.name
        self.clos_switch = clos_switch
        self.ports = {n: SwitchPort(n, clos_switch.intf(n)) for n in clos_switch.ports}
        self.switch = Switch(self.ports, cpu_port=cpu_port, captures=captures, clock=scheduler.now,
                             buffer_config=buffer_config, catch_up=0.0)
        self.agent = EngineAgent(self.switch)     # what `rocelab switch` serves on its agent socket
        for port in self.switch.egress_ports.values():
            port._rng.seed(f"{seed}/{self.name}/{port.number}")
        self.switch.rng = random.Random(f"{seed}/{self.name}/p4")    # the P4 `random` extern
        # Packet-outs arrive in the P4Runtime server's thread: the scheduler's thread takes them in.
        self.switch.wake_hook = lambda: scheduler.call_soon_threadsafe(self._take_injected)
        self.server = None
        self.models = {}
        self._service_at = None
        self._service_timer = None
        self.up = True
        self.on_queued = None        # callable() after a frame was queued (the idle queue sampler's wake)

    # -- the data path: events in, events out --------------------------------------------------
    def receive(self, port, frame):
        if not self.up:
            return
        switch = self.switch
        now = self.scheduler.now()
        switch._receive(port, frame, now)
        self._after_input(now)

    def _after_input(self, now):
        """Serve what the input queued, and tell the idle queue sampler."""
        switch = self.switch
        if switch._busy or switch.delay_line:
            self._schedule(now if switch.delay_line else self._first_send(now))
            if self.on_queued is not None:
                self.on_queued()

    def _first_send(self, now):
        """When a port with something queued may first send: now if its link is free, else
        when the first such link frees. A service before then would send nothing (a frame
        that finds its port still serializing the one before is served once, not twice)."""
        first = None
        ports = self.switch.egress_ports
        for number in self.switch._busy:
            port = ports[number]
            free = port.link_free_at if port.rate_bps else now
            if free <= now:
                return now
            if first is None or free < first:
                first = free
        return first

    def _take_injected(self):
        """Frames other threads injected (packet-out on the CPU port), received now, like the
        real-time loop does after its poll; only what is queued now."""
        switch = self.switch
        now = self.scheduler.now()
        with switch.lock:
            for _ in range(len(switch._injected)):
                port, frame = switch._injected.popleft()
                if self.up:
                    switch._receive(port, frame, now)
        self._after_input(now)

    def _schedule(self, when):
        if self._service_at is not None and self._service_at <= when:
            return
        if self._service_timer is not None:
            self._service_timer.cancel()
        self._service_at = when
        self._service_timer = self.scheduler.at(when, self._service)

    def _service(self):
        self._service_at = self._service_timer = None
        if not self.up:
            return
        wake = self.switch._service(self.scheduler.now())
        if wake is not None:
            self._schedule(wake)

    # -- what the agent gives a real-time switch ------------------------------------------------
    def apply_port_models(self, pfc_priorities, watchdog_s=None):
        """Each port's PortModel (self.models, set by the fabric), which PFC priorities pause
        it, and the PFC watchdog's detection time (as the real-time node hands its agent)."""
        agents.apply_port_models(self.agent, self.models, pfc_priorities, watchdog_s)

    def port_status(self):
        return {n: self.agent.port_counters(n) for n in self.ports}

    def queue_depths(self):
        return {(n, prio): port.depth(prio) for n, port in self.switch.egress_ports.items()
                if n in self.ports for prio in range(NUM_PRIORITIES) if port.queues[prio]}

    def crash(self):
        """Switch down: everything queued is lost and nothing more is forwarded."""
        self.up = False
        for port in self.switch.egress_ports.values():
            port.clear()
        self.switch._busy.clear()


class HostPort:
    """The NIC's raw socket: frames in arrive from the leaf's wire, frames out go onto the
    host's wire. Like the real socket's BPF filter, it takes RoCEv2 to this NIC's MAC and MAC
    control frames (PFC), and nothing else."""

    def __init__(self, host, mac):
        self.host = host
        self.mac = bytes.fromhex(mac.replace(":", ""))
        self.wire = None
        self.inbox = deque()
        self._empty = BlockingIOError()   # raised every loop turn the inbox is empty: made once
        self.counters = PortCounters()
        self.filtered = 0

    def send(self, frame):
        if self.wire is None or not self.wire.send(frame):
            raise BlockingIOError("link down")
        self.counters.tx_packets += 1
        self.counters.tx_bytes += len(frame)
        return len(frame)

    def recv(self, _bufsize=65536):
        if not self.inbox:
            raise self._empty.with_traceback(None)
        return self.inbox.popleft()

    def deliver(self, frame):
        c = self.counters
        c.rx_packets += 1
        c.rx_bytes += len(frame)
        ethertype = frame[12:14]
        if ethertype == ETH_MAC_CONTROL or (
                frame[:6] == self.mac and ethertype == ETH_IPV4 and frame[23] == 17
                and frame[14 + (frame[14] & 0x0F) * 4 + 2:14 + (frame[14] & 0x0F) * 4 + 4] == ROCE_PORT):
            self.inbox.append(frame)
            self.host.wake()
        else:
            self.filtered += 1

    def close(self):
        pass


class DatagramNet:
    """The ranks' barrier datagrams (UDP in real time): delivered after a fixed latency, out
    of band, so the data path carries only what the NICs send."""

    def __init__(self, scheduler, latency_s=2e-6):
        self.scheduler = scheduler
        self.latency_s = latency_s
        self.sockets = {}          # (ip, port) -> DatagramSocket

    def socket(self, host, ip, port):
        sock = DatagramSocket(self, host, (ip, port))
        self.sockets[(ip, port)] = sock
        return sock

    def send(self, src, dst, data):
        target = self.sockets.get(dst)
        if target is not None:
            self.scheduler.after(self.latency_s, target._arrive, data, src)


class DatagramSocket:
    def __init__(self, net, host, addr):
        self.net = net
        self.host = host
        self.addr = addr
        self.queue = deque()
        self._empty = BlockingIOError()

    def sendto(self, data, dst):
        self.net.send(self.addr, tuple(dst), bytes(data))
        return len(data)

    def recvfrom(self, _bufsize):
        if not self.queue:
            raise self._empty.with_traceback(None)
        return self.queue.popleft()

    def _arrive(self, data, src):
        self.queue.append((data, src))
        self.host.wake()

    def fileno(self):
        return -1

    def close(self):
        self.net.sockets.pop(self.addr, None)


class SimHost:
    """A host: its NIC port and barrier socket, and the rank process that uses them."""

    def __init__(self, scheduler, clos_host, datagrams):
        self.scheduler = scheduler
        self.name = clos_host.name
        self.clos_host = clos_host
        self.nic_port = HostPort(self, clos_host.nics[0].mac)
        self.control_socket = None
        self.process = None
        self.rx_coalesce_s = 0.0     # set by the fabric: one full frame's time on the host's link
        self.tx_lookahead_s = 0.0    # the NIC's (traffic/nic.py), set by the fabric: the same frame time
        self.linger_s = 0.0          # the rank's stay after the final barrier, set by the fabric (a few RTTs)

    def attach_control(self, datagrams, ip, port):
        """The rank's barrier socket, bound to its IP and the job's control port."""
        if self.control_socket is not None:
            self.control_socket.close()
        self.control_socket = datagrams.socket(self, ip, port)

    def wait(self, seconds):
        """The NIC loop's sleep: until a frame or datagram arrives, or `seconds` pass."""
        if self.nic_port.inbox or (self.control_socket and self.control_socket.queue):
            return
        self.process.wait(seconds)

    def wake(self):
        """Input arrived: the NIC loop runs now, unless it wakes within a frame time anyway
        (its next pacer slot or timer), when it takes the input in then, like a NIC's interrupt
        moderation (frames are still taken in before that turn transmits anything)."""
        process = self.process
        if process is not None and not process.resumes_within(self.rx_coalesce_s):
            process.wake()

    def nic_counters(self):
        c = self.nic_port.counters
        return {0: {"rx_packets": c.rx_packets, "rx_bytes": c.rx_bytes,
                    "tx_packets": c.tx_packets, "tx_bytes": c.tx_bytes}}
