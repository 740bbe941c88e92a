"""Rank coordination over the network: a UDP barrier (rank 0 coordinates) with retries.

Messages are small JSON datagrams to each rank's IP on the job's control port,
sent with the control class's DSCP. ``hello`` only makes the kernel resolve a
peer's MAC (ARP) before the data path needs it; ``ready``/``go`` implement a
barrier per epoch. Every wait is driven by the caller's loop (so the NIC keeps
answering ACKs while waiting) and bounded by a deadline.
"""
import json
import socket

IP_TOS = 1


class BarrierTimeout(Exception):
    pass


class ControlPlane:
    def __init__(self, rank, ips, port, dscp=46, coordinator=0, sock=None):
        """sock: an already bound datagram socket (virtual time passes a simulated one);
        by default a UDP socket bound to this rank's IP and `port`."""
        self.rank = rank
        self.ips = ips                      # rank -> IP
        self.port = port
        self.coordinator = coordinator
        self.ready = {}                     # epoch -> set of ranks (coordinator only)
        self.released = set()               # epochs for which we received "go"
        self._last_ready = {}
        self._released_sent = set()         # epochs whose "go" the coordinator has broadcast
        if sock is not None:
            self.sock = sock
            return
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.setsockopt(socket.IPPROTO_IP, IP_TOS, dscp << 2)
        try:
            self.sock.bind((ips[rank], port))
        except OSError as exc:
            self.sock.close()
            raise OSError(exc.errno, f"control plane: cannot bind UDP {ips[rank]}:{port}: {exc.strerror}") from None
        self.sock.setblocking(False)

    def fileno(self):
        return self.sock.fileno()

    def _send(self, rank, msg):
        try:
            self.sock.sendto(json.dumps(msg).encode(), (self.ips[rank], self.port))
        except OSError:
            pass        # unreachable for now: retried by the caller's loop

    def hello(self, peers):
        for p in peers:
            self._send(p, {"t": "hello", "rank": self.rank})

    def poll(self):
        """Handle every datagram waiting on the socket."""
        while True:
            try:
                data, _addr = self.sock.recvfrom(2048)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            try:
                msg = json.loads(data)
                kind, epoch = msg.get("t"), msg.get("epoch")
            except (ValueError, AttributeError):
                continue
            if kind == "ready" and self.rank == self.coordinator:
                sender = msg.get("rank")
                if not isinstance(sender, int) or not 0 <= sender < len(self.ips):
                    continue
                ranks = self.ready.setdefault(epoch, set())
                ranks.add(sender)
                if len(ranks) == len(self.ips):
                    self.released.add(epoch)
                    # answer this rank even if the others were released earlier (a lost "go")
                    targets = [sender] if epoch in self._released_sent else range(len(self.ips))
                    for r in targets:
                        if r != self.rank:
                            self._send(r, {"t": "go", "epoch": epoch})
                    self._released_sent.add(epoch)
            elif kind == "go":
                self.released.add(epoch)

    def arrive(self, epoch, now):
        """Say we reached barrier `epoch` (re-sent every 50 ms while waiting)."""
        if self.rank == self.coordinator:
            ranks = self.ready.setdefault(epoch, set())
            if self.rank not in ranks:
                ranks.add(self.rank)
                if len(ranks) == len(self.ips):
                    self.released.add(epoch)
                    self._released_sent.add(epoch)
                    for r in range(len(self.ips)):
                        if r != self.rank:
                            self._send(r, {"t": "go", "epoch": epoch})
            return
        if now - self._last_ready.get(epoch, -1.0) >= 0.05:
            self._last_ready[epoch] = now
            self._send(self.coordinator, {"t": "ready", "epoch": epoch, "rank": self.rank})

    def passed(self, epoch):
        return epoch in self.released

    def close(self):
        self.sock.close()
