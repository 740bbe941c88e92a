"""Fixtures shared by the test modules."""
import signal

import pytest


@pytest.fixture
def sigint_as_from_a_terminal():
    """SIGINT handled as in a shell's foreground job, for tests of what Ctrl-C does. A suite run
    as a background job (`make test &`, nohup) starts with SIGINT ignored, which the test process
    and the commands it starts inherit, and which `rocelab` rightly honours."""
    previous = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)    # children exec with SIG_DFL
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
