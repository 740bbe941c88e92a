"""Run Ryu's manager (ryu-manager) on Python 3.11 with the project's apps.

ryu 4.34's WSGI layer reads ``eventlet.wsgi.ALREADY_HANDLED``, which current eventlet
no longer defines; without it, loading ``ryu.app.wsgi`` fails. Defining the sentinel
before the manager starts is the whole fix (see DESIGN "Dependencies"). Everything
else is ryu-manager as shipped: ``python -m testbed.te.launcher --wsapi-host 127.0.0.1
--wsapi-port 8080 testbed.te.app``.
"""
import sys
import warnings


def patch_eventlet_for_ryu():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # eventlet's import-time deprecation notice
        import eventlet.wsgi
    if not hasattr(eventlet.wsgi, "ALREADY_HANDLED"):
        # Ryu only compares against it by identity: any unique object will do.
        eventlet.wsgi.ALREADY_HANDLED = object()


def run_manager(args):
    """ryu-manager with `args` (its own command line); returns when the manager stops."""
    patch_eventlet_for_ryu()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from ryu.cmd import manager
    manager.main(args=list(args), prog="rocelab te run (ryu-manager)")
    return 0


if __name__ == "__main__":
    sys.exit(run_manager(sys.argv[1:]))
