"""The P4Runtime server of the engine target.

    from testbed.p4rt.server import P4RuntimeServer
    server = P4RuntimeServer(switch, device_id=1, address="127.0.0.1:9559", program=None)
    server.start(); ...; server.stop()

Modules: p4info (id/name index, byte-string codec), entities (Write/Read of each
entity kind against an engine Pipeline), errors (status codes), idle_timeout (which
entries are idle for their TTL), digests (DigestList buffering, dedup cache and acks), oneshot (the
selector groups behind one-shot action sets), server (gRPC service: arbitration, stream, pipeline
config, packet I/O, digests, idle-timeout notifications).
"""
