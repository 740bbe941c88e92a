"""The signal windows of testbed/net/lifecycle.py: a spawn and its ledger record, a teardown, a
finished phase's report. A signal that arrives inside one acts when it closes, also when the
kernel hands it to another thread (gRPC's, a pcap writer's), where a mask on the main thread
held nothing back."""
import signal
import threading
import time

import pytest

from testbed.net.lifecycle import Terminated, ctrl_c_held, interruptions_held, signals_deferred


@pytest.fixture
def other_thread():
    """A thread started before the window, blocking no signal: the kernel may pick it."""
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    yield thread
    stop.set()
    thread.join()


@pytest.mark.parametrize("window", [signals_deferred, interruptions_held])
@pytest.mark.parametrize("signum, exception", [(signal.SIGINT, KeyboardInterrupt), (signal.SIGTERM, Terminated)])
def test_a_signal_another_thread_takes_acts_when_the_window_closes(other_thread, window, signum, exception):
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)       # the default would kill: it unwinds instead
    reached = []
    try:
        with pytest.raises(exception):
            with window():
                signal.pthread_kill(other_thread.ident, signum)
                time.sleep(0.05)          # Python runs signal handlers between these lines
                reached.append("end of the window")
        assert reached == ["end of the window"]
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler     # restored
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    finally:
        for signum_, handler in previous.items():
            signal.signal(signum_, handler)


def test_a_second_signal_acts_at_once_only_while_a_report_is_held():
    previous = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        reached = []
        with pytest.raises(KeyboardInterrupt):
            with interruptions_held():
                signal.raise_signal(signal.SIGINT)
                reached.append("after the first")
                signal.raise_signal(signal.SIGINT)
                reached.append("after the second")
        assert reached == ["after the first"]
        with pytest.raises(KeyboardInterrupt):
            with signals_deferred():
                signal.raise_signal(signal.SIGINT)
                signal.raise_signal(signal.SIGINT)
                reached.append("teardown finished")
        assert reached == ["after the first", "teardown finished"]
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_held_signal_goes_to_the_handler_the_window_replaced():
    seen = []
    previous = signal.signal(signal.SIGHUP, lambda signum, _frame: seen.append(signum))
    try:
        with signals_deferred():
            signal.raise_signal(signal.SIGHUP)
            assert seen == []
        assert seen == [signal.SIGHUP]
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        with signals_deferred():
            signal.raise_signal(signal.SIGHUP)       # ignored before: ignored after
    finally:
        signal.signal(signal.SIGHUP, previous)


def test_ctrl_c_held_lets_a_loop_stop_at_its_next_turn_or_drops_it_while_closing():
    # A sweep's client loop stops at its next turn (raised anywhere, a Ctrl-C landed inside
    # Dask's client code); closing the cluster drops a first one: nothing is left to stop.
    previous = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        turns = 0
        with pytest.raises(KeyboardInterrupt):
            with ctrl_c_held() as stop:
                while not stop:
                    turns += 1
                    if turns == 3:
                        signal.raise_signal(signal.SIGINT)
        assert turns == 3
        with ctrl_c_held(act_after=False):
            signal.raise_signal(signal.SIGINT)
        with pytest.raises(KeyboardInterrupt):
            with ctrl_c_held(act_after=False):
                signal.raise_signal(signal.SIGINT)
                signal.raise_signal(signal.SIGINT)        # a second one acts at once
                raise AssertionError("not reached")
        term = signal.getsignal(signal.SIGTERM)
        with ctrl_c_held():
            assert signal.getsignal(signal.SIGTERM) == term       # SIGTERM keeps its way
    finally:
        signal.signal(signal.SIGINT, previous)


def test_an_ignored_ctrl_c_stays_ignored_inside_every_window():
    # `rocelab sweep ... &` in a script starts with SIGINT ignored: a Ctrl-C meant for the
    # script's foreground job stopped the sweep's loop, which then reported every point
    # "cancelled: None" with status "errors", though nothing acted on the signal.
    previous = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        for window in (ctrl_c_held, interruptions_held, signals_deferred):
            with window() as held:
                signal.raise_signal(signal.SIGINT)
                signal.raise_signal(signal.SIGINT)
                assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            assert not held
    finally:
        signal.signal(signal.SIGINT, previous)
