"""Ask each switch's P4Runtime server for its Capabilities: is it there, which API version.

Under the Ryu app this runs in the worker process (see :mod:`testbed.te.worker`); the
result names the process that made the call and whether eventlet is loaded in it, so
the REST answer itself shows that gRPC stayed away from the green threads.
"""
import os
import sys
import threading
import time


def probe(addr, timeout_s=2.0):
    import grpc
    from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

    started = time.monotonic()
    result = {"addr": addr, "pid": os.getpid(), "eventlet_loaded": "eventlet" in sys.modules,
              "thread": threading.current_thread().name}
    channel = grpc.insecure_channel(addr)
    try:
        reply = p4runtime_pb2_grpc.P4RuntimeStub(channel).Capabilities(
            p4runtime_pb2.CapabilitiesRequest(), timeout=timeout_s)
        result.update(reachable=True, p4runtime_api_version=reply.p4runtime_api_version)
    except grpc.RpcError as exc:
        code = exc.code()
        result.update(reachable=False, error=f"{code.name if code else 'UNKNOWN'}: {exc.details()}")
    finally:
        channel.close()
    result["rtt_ms"] = round((time.monotonic() - started) * 1000, 3)
    return result


def probe_all(clos, switches=None, timeout_s=2.0):
    names = switches or list(clos.switches)
    return {name: dict(probe(clos.switches[name].grpc_addr, timeout_s), device_id=clos.switches[name].device_id)
            for name in names}
