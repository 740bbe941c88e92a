"""The discrete-event scheduler under virtual time (testbed/sim/scheduler.py)."""
from testbed.sim.scheduler import Process, Scheduler


def test_events_run_in_time_order_then_in_the_order_they_were_scheduled():
    sched = Scheduler()
    ran = []
    sched.at(2e-6, ran.append, "b")
    sched.at(1e-6, ran.append, "a")
    sched.at(2e-6, ran.append, "c")
    sched.after(0.0, ran.append, "now")
    assert sched.run() == 2e-6
    assert ran == ["now", "a", "b", "c"]


def test_cancelled_timers_never_run_and_do_not_pile_up_in_the_heap():
    # A NIC's wait timeout is cancelled by nearly every frame it gets: a long run cancels
    # far more timers than ever fire. The heap must stay the size of what is live.
    sched = Scheduler()
    ran = []
    live = [sched.at(1.0 + i, ran.append, i) for i in range(10)]
    for i in range(10_000):
        sched.at(0.5 + i * 1e-6, ran.append, "cancelled").cancel()
        assert len(sched._heap) <= 2 * (len(live) + 64)
    live[3].cancel()
    sched.run()
    assert ran == [0, 1, 2, 4, 5, 6, 7, 8, 9]


def test_cancelling_a_timer_that_already_ran_changes_nothing():
    sched = Scheduler()
    ran = []
    timer = sched.at(1e-6, ran.append, "first")
    sched.run()
    timer.cancel()
    later = [sched.at(2e-6 + i * 1e-9, ran.append, i) for i in range(100)]
    later[0].cancel()
    sched.run()
    assert ran == ["first"] + list(range(1, 100))


def test_a_process_sleeps_until_woken_or_its_timeout():
    sched = Scheduler()
    log = []

    def body():
        proc.wait(1e-3)                  # woken early, at 10 us
        log.append(("woken", round(sched.now() * 1e6, 3)))
        proc.wait(5e-6)                  # nobody wakes it: the timeout ends the wait
        log.append(("timed out", round(sched.now() * 1e6, 3)))

    proc = Process(sched, body, "rank").start()
    sched.at(10e-6, proc.wake)
    sched.run()
    assert proc.finished and proc.error is None
    assert log == [("woken", 10.0), ("timed out", 15.0)]
