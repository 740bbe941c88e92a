"""Digest lists as the P4Runtime spec ("DigestEntry", "DigestList") and simple_switch_grpc's
digest manager (p4lang/PI) build them from the digests the data plane raises.

Per configured digest (its DigestEntry.Config):
- A digest goes into the digest's buffer; the buffer is sent as one DigestList when it holds
  max_list_size digests (0: no limit), at once when max_timeout_ns is 0, else max_timeout_ns
  after its first digest went in.
- With ack_timeout_ns > 0, a digest equal to one buffered or sent but not yet acknowledged is
  dropped (the spec's cache). A DigestListAck (digest_id, list_id) clears that list's digests
  from the cache; so does ack_timeout_ns passing since the list was sent. With ack_timeout_ns 0
  nothing is cached, and every digest is sent.
- list_id counts from 1 per digest. MODIFY keeps the buffer and the cache (as PI), and sends the
  buffer at once if the new config makes it due; DELETE, or a new pipeline, drops them.
Times are the host's monotonic clock: a timer thread, started only when some config has a
non-zero timeout, sends the buffers and expires the cache entries that are due.
"""
import threading
import time


class _Digest:
    def __init__(self, config):
        self.config = config                 # p4.v1.DigestEntry.Config
        self.buffer = []                     # values (tuples of ints) waiting to be sent
        self.first_in_ns = None              # when the buffer's first digest went in
        self.cached = set()                  # values buffered or sent and not yet acked/expired
        self.unacked = {}                    # list id -> (sent at ns, [values])
        self.next_list_id = 1


def _is_due(digest, now):
    """Whether the buffer goes out as a list at `now`: full, not to be held, or held long enough."""
    size, wait = digest.config.max_list_size, digest.config.max_timeout_ns
    return bool(digest.buffer) and ((size and len(digest.buffer) >= size) or not wait
                                    or digest.first_in_ns + wait <= now)


class DigestLists:
    """send(digest_id, list_id, [values]) is called for every list, outside the lock."""

    def __init__(self, send, clock_ns=time.monotonic_ns):
        self._send = send
        self._clock_ns = clock_ns
        self._lock = threading.Condition()
        self._digests = {}                   # digest id -> _Digest
        self._timer = None
        self._closed = False
        self._changes = 0                    # bumped when the timer may have a new deadline

    def configure(self, digest_id, config):
        """INSERT/MODIFY (a DigestEntry.Config) or DELETE (None) of a digest's config."""
        out = []
        with self._lock:
            if config is None:
                self._digests.pop(digest_id, None)
            elif digest_id in self._digests:
                digest = self._digests[digest_id]
                digest.config = config
                # a MODIFY may make the buffer due at once (max_timeout_ns 0, a smaller max_list_size)
                now = self._clock_ns()
                if _is_due(digest, now):
                    out.append(self._take(digest_id, digest, now))
            else:
                self._digests[digest_id] = _Digest(config)
            if config is not None and (config.max_timeout_ns or config.ack_timeout_ns):
                self._start_timer()
            self._changes += 1
            self._lock.notify()
        self._deliver(out)

    def learn(self, digest_id, values):
        """One digest from the data plane (dropped unless its digest is configured)."""
        with self._lock:
            digest = self._digests.get(digest_id)
            if digest is None:
                return
            if digest.config.ack_timeout_ns:
                if values in digest.cached:
                    return
                digest.cached.add(values)
            now = self._clock_ns()
            if not digest.buffer:
                digest.first_in_ns = now
                self._changes += 1           # the timer has a new deadline
                self._lock.notify()
            digest.buffer.append(values)
            out = [self._take(digest_id, digest, now)] if _is_due(digest, now) else []
        self._deliver(out)

    def ack(self, digest_id, list_id):
        with self._lock:
            digest = self._digests.get(digest_id)
            if digest is not None and list_id in digest.unacked:
                digest.cached.difference_update(digest.unacked.pop(list_id)[1])

    def close(self):
        with self._lock:
            self._closed = True
            self._changes += 1
            self._lock.notify()
            timer = self._timer
        if timer is not None and timer is not threading.current_thread():
            timer.join()      # its last sweep sends what was due; then no thread of ours runs on

    # -- internals ------------------------------------------------------------------
    def _take(self, digest_id, digest, now):
        """The buffer as a list sent at `now` (caller holds the lock)."""
        list_id, values = digest.next_list_id, digest.buffer
        digest.next_list_id += 1
        digest.buffer, digest.first_in_ns = [], None
        if digest.config.ack_timeout_ns:
            digest.unacked[list_id] = (now, values)
            self._changes += 1               # a new expiry for the timer
            self._lock.notify()
        return digest_id, list_id, values

    def _deliver(self, lists):
        for digest_id, list_id, values in lists:
            self._send(digest_id, list_id, values)

    def _start_timer(self):
        if self._timer is None:
            self._timer = threading.Thread(target=self._run_timer, name="p4rt-digest-timer", daemon=True)
            self._timer.start()

    def _due(self, now):
        """Lists due at `now`, after expiring old cache entries; and the next deadline (ns)."""
        out, deadline = [], None
        for digest_id, digest in self._digests.items():
            config = digest.config
            if _is_due(digest, now):
                out.append(self._take(digest_id, digest, now))
            elif digest.buffer:
                at = digest.first_in_ns + config.max_timeout_ns
                deadline = at if deadline is None else min(deadline, at)
            for list_id, (sent_ns, values) in list(digest.unacked.items()):
                at = sent_ns + config.ack_timeout_ns
                if at <= now or not config.ack_timeout_ns:
                    digest.cached.difference_update(values)
                    del digest.unacked[list_id]
                else:
                    deadline = at if deadline is None else min(deadline, at)
        return out, deadline

    def sweep(self, now_ns=None):
        """Send the buffers whose max_timeout_ns has passed and expire the cache entries older
        than ack_timeout_ns, at `now_ns` (default: the clock). Returns the next deadline (ns)
        or None. The timer thread runs it; tests may call it with their own times."""
        deadline, _ = self._sweep(now_ns)
        return deadline

    def _sweep(self, now_ns=None):
        with self._lock:
            out, deadline = self._due(self._clock_ns() if now_ns is None else now_ns)
            changes = self._changes
        self._deliver(out)
        return deadline, changes

    def _run_timer(self):
        while True:
            deadline, changes = self._sweep()
            with self._lock:
                if self._closed:
                    return
                if changes != self._changes:        # a digest or a config came in meanwhile
                    continue
                wait = None if deadline is None else max(0.0, (deadline - self._clock_ns()) / 1e9)
                self._lock.wait(wait)
