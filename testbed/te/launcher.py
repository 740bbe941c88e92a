"""Run Ryu's manager (ryu-manager) on Python 3.11 with the project's apps.

ryu 4.34's WSGI layer reads ``eventlet.wsgi.ALREADY_HANDLED``, which current eventlet
no longer defines; without it, loading ``ryu.app.wsgi`` fails. Defining the sentinel
before the manager starts is the whole fix (see DESIGN "Dependencies"). Everything
else is ryu-manager as shipped: ``python -m testbed.te.launcher --wsapi-host 127.0.0.1
--wsapi-port 8080 testbed.te.app``.
"""
import logging
import sys
import warnings


def patch_eventlet_for_ryu():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # eventlet's import-time deprecation notice
        import eventlet.wsgi
    if not hasattr(eventlet.wsgi, "ALREADY_HANDLED"):
        # Ryu only compares against it by identity: any unique object will do.
        eventlet.wsgi.ALREADY_HANDLED = object()


class _GrpcLocksStayNative(logging.Filter):
    """Drops eventlet's "N RLock(s) were not greened" (logged through logging's last-resort
    handler: eventlet's logger has none). The RLocks it counts once ryu's are green from the
    start are gRPC's, made when `rocelab` loaded its command groups (testbed.control), and
    they must stay native: gRPC and eventlet do not mix, which is why every P4Runtime call of
    the app runs in testbed.te.worker's process."""

    def filter(self, record):
        return not (record.name == "eventlet" and "were not greened" in record.getMessage())


def green_everything_first(args):
    """Eventlet's monkey-patching, before ryu is imported. ryu-manager patches threading only
    inside main(), after its imports (vendored pyparsing's class-level locks) and its log
    handler have made RLocks eventlet can no longer reach, and eventlet says so on stderr
    ("5 RLock(s) were not greened"). The same patch done first makes them green from the
    start; ryu's own calls then find it done. --enable-debugger keeps native threads, as
    ryu-manager does."""
    import eventlet
    quiet = _GrpcLocksStayNative()
    handler = logging.lastResort
    if handler is not None:
        handler.addFilter(quiet)
    try:
        eventlet.monkey_patch(thread="--enable-debugger" not in args)
    finally:
        if handler is not None:
            handler.removeFilter(quiet)


def run_manager(args):
    """ryu-manager with `args` (its own command line); returns when the manager stops."""
    patch_eventlet_for_ryu()
    green_everything_first(args)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from ryu.cmd import manager
    manager.main(args=list(args), prog="rocelab te run (ryu-manager)")
    return 0


if __name__ == "__main__":
    sys.exit(run_manager(sys.argv[1:]))
