"""A discrete-event scheduler with cooperative processes.

Events are (time, sequence) ordered, so equal times run in the order they were scheduled and
a run is the same on every machine. Blocking-style code (the rank runner's loops) runs as a
:class:`Process`: a greenlet that gives the clock back to the scheduler whenever it waits.
"""
from collections import deque
import heapq
import itertools

from greenlet import greenlet


class Timer:
    __slots__ = ("when", "fn", "args", "cancelled", "scheduler")

    def __init__(self, when, fn, args, scheduler):
        self.when = when
        self.fn = fn
        self.args = args
        self.cancelled = False
        self.scheduler = scheduler

    def cancel(self):
        if not self.cancelled:
            self.cancelled = True
            if self.scheduler is not None:       # still in the heap
                self.scheduler._cancelled_one()


class Scheduler:
    def __init__(self):
        self._heap = []
        self._seq = itertools.count()
        self._now = 0.0
        self.events = 0
        self.hub = greenlet.getcurrent()
        self._stopped = False
        self._posted = deque()      # (fn, args) handed over by other threads
        self._cancelled = 0         # cancelled timers still in the heap

    def call_soon_threadsafe(self, fn, *args):
        """From any thread: run fn(*args) in the scheduler's thread, as an event at the simulated
        time the scheduler has reached when it next looks (at once when it is running; at the
        start of the next run otherwise). For what other threads cause (a P4Runtime server's
        packet-out): such an event has no simulated time of its own."""
        self._posted.append((fn, args))      # deque.append is atomic under the GIL

    def now(self):
        """Simulated seconds since the start."""
        return self._now

    def at(self, when, fn, *args):
        if when < self._now:
            when = self._now
        timer = Timer(when, fn, args, self)
        heapq.heappush(self._heap, (when, next(self._seq), timer))
        return timer

    def _cancelled_one(self):
        """A cancelled timer stays in the heap until its time; most are wait timeouts that a
        frame cut short, and left there they would make every push and pop dearer. When they
        are half the heap, the heap is rebuilt without them (same order: (time, sequence))."""
        self._cancelled += 1
        heap = self._heap
        if self._cancelled > 64 and self._cancelled * 2 > len(heap):
            heap[:] = [entry for entry in heap if not entry[2].cancelled]
            heapq.heapify(heap)
            self._cancelled = 0

    def after(self, delay, fn, *args):
        return self.at(self._now + delay, fn, *args)

    def stop(self):
        self._stopped = True

    def pass_time(self, seconds):
        """Run what falls due in the next `seconds`, then stand at their end (an idle fabric's
        time passes too)."""
        when = self._now + seconds
        self.run(until=when)
        self._now = max(self._now, when)

    def run(self, until=None, done=None, on_step=None):
        """Run events in time order until none are left, simulated time passes `until`,
        `done()` is true or stop() is called. `on_step(now, events)` is called every
        4096 events (progress display, Ctrl-C checks). Returns the simulated time reached."""
        heap = self._heap
        pop = heapq.heappop
        posted = self._posted
        self._stopped = False
        while not self._stopped:
            while posted:
                fn, args = posted.popleft()
                self.at(self._now, fn, *args)
            if not heap:
                break
            when, _seq, timer = heap[0]
            if until is not None and when > until:
                self._now = until
                break
            pop(heap)
            if timer.cancelled:
                self._cancelled -= 1
                continue
            self._now = when
            timer.scheduler = None
            timer.fn(*timer.args)
            self.events += 1
            if not self.events & 4095:
                if on_step is not None:
                    on_step(when, self.events)
                if done is not None and done():
                    break
        return self._now


class Process:
    """Blocking-style code on the simulated clock.

    Inside the process, :meth:`wait` gives control back to the scheduler until :meth:`wake`
    is called (by an event: a frame arrived) or the timeout passes."""

    def __init__(self, scheduler, fn, name):
        self.scheduler = scheduler
        self.name = name
        self.result = None
        self.error = None
        self.finished = False
        self._fn = fn
        self._glet = greenlet(self._main, parent=scheduler.hub)
        self._timer = None
        self._waiting = False

    def start(self, delay=0.0):
        self.scheduler.after(delay, self._resume)
        return self

    def _main(self):
        try:
            self.result = self._fn()
        except BaseException as exc:   # recorded and re-raised by the owner, not lost in the hub
            self.error = exc
        finally:
            self.finished = True

    def _resume(self):
        self._timer = None
        self._waiting = False
        self._glet.switch()
        if self.error is not None and not isinstance(self.error, Exception):
            raise self.error          # KeyboardInterrupt, SystemExit: end the whole run

    def wait(self, timeout):
        """Called from inside the process: sleep until woken or `timeout` seconds pass."""
        self._waiting = True
        self._timer = self.scheduler.after(max(0.0, timeout), self._resume)
        self.scheduler.hub.switch()

    def resumes_within(self, seconds):
        """True when the process waits and its timeout ends within `seconds` from now."""
        timer = self._timer
        return self._waiting and timer is not None and timer.when - self.scheduler._now <= seconds

    def wake(self):
        """Resume a waiting process now (after the events already due at this time)."""
        if self._waiting and self._timer is not None:
            self._timer.cancel()
            self._waiting = False
            self._timer = self.scheduler.after(0.0, self._resume)
