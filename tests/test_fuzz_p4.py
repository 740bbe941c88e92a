"""Fuzzing the P4-side boundaries: STF files into `rocelab p4 test`'s runner, mutated P4 programs
into the compiler (and the packets of those that compile into their pipeline), P4Runtime
messages (Write, Read, SetForwardingPipelineConfig with damaged P4Infos, StreamChannel) into
the engine's server, requests into the switch agent.

Bounded and seeded in `make test` (a fixed number of inputs each, a few seconds); with
ROCELAB_FUZZ_SECONDS set (`make fuzz`) they run for that long (shared). Each prints its figure
(inputs tried, crashes, hangs, tracebacks) and asserts all three are 0. A crash is an exception
escaping the boundary, an engine fault answered as INTERNAL, an error without its location, or
an agent "internal error"; a hang is one input taking more than HANG_SECONDS.
"""
import contextlib
import glob
import io
import json
import os
import re
import signal
import socket

import grpc
import pytest
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from fuzz_helpers import Budget, Tally, make_rng, mutate_bytes, mutate_tree, odd_value
from switch_fake_engine import SocketPort

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
HANG_SECONDS = 10        # real answers take milliseconds; a parse may take a second on a busy box
RPC_HANG_SECONDS = 120   # a wildcard Read of 65536 counter cells takes CPU seconds, many more on a loaded box


class Hang(Exception):
    pass


@contextlib.contextmanager
def hang_guard(seconds=HANG_SECONDS):
    def alarm(*_):
        raise Hang()
    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _tracebacks(tally, capfd, what):
    out, err = capfd.readouterr()
    if "Traceback" in out + err:
        tally.tracebacks.append((what, (out + err)[-300:]))


ODD_TOKENS = ["0", "-1", "0x201", "0x1ff", "512", "65536", "0xffffffffffffffffffff", "9" * 60, "1e400", "nan",
              "inf", "*", "**", "0x", "0b2", "$", "&&&", "->", "..", "/", "/99", ":", "(", ")", ",", "=", "",
              "\x00", "\ufffd", "x" * 300, "é", "#", "$member(id:0)", "$group(id:9)", "0.5", "-0"]


# ============================================================ STF -> the runner

STF_PROGRAMS = ["rt_externs", "rt_selector", "rt_clone_mcast", "rt_tables_ternary"]


@pytest.fixture(scope="module")
def stf_cases():
    from testbed.p4engine import compile_file
    cases = []
    for name in STF_PROGRAMS:
        program = compile_file(os.path.join(HERE, "p4", f"{name}.p4"))
        with open(os.path.join(HERE, "p4", f"{name}.stf")) as f:
            cases.append((name, program, f.read()))
    return cases


def _stf_lines():
    lines = []
    for path in sorted(glob.glob(os.path.join(HERE, "p4", "*.stf"))):
        with open(path) as f:
            lines.extend(l for l in f.read().splitlines() if l.strip() and not l.startswith("#"))
    return lines


def mutate_stf(text, corpus, rng):
    lines = text.splitlines()
    for _ in range(rng.randint(1, 4)):
        pick = rng.random()
        pos = rng.randrange(len(lines) + 1)
        if pick < 0.45 and lines:                 # one token of a line replaced
            i = min(pos, len(lines) - 1)
            tokens = re.split(r"(\s+|[:(),=/])", lines[i])
            j = rng.randrange(len(tokens))
            tokens[j] = rng.choice(ODD_TOKENS + [str(odd_value(rng))])
            lines[i] = "".join(tokens)
        elif pick < 0.6:
            lines.insert(pos, rng.choice(corpus))
        elif pick < 0.7 and lines:
            del lines[min(pos, len(lines) - 1)]
        elif pick < 0.8:
            command = rng.choice(["packet", "expect", "add", "setdefault", "wait", "remove", "mirroring_add",
                                  "mc_mgrp_create", "mc_node_create", "mc_node_associate", "register_write",
                                  "register_read", "counter_read", "counter_write", "check_counter",
                                  "meter_set_rates", "meter_array_set_rates", "meter_get_rates",
                                  "act_prof_create_member", "act_prof_create_group",
                                  "act_prof_add_member_to_group", "mirroring_add_mc", "no_packet"])
            args = " ".join(rng.choice(ODD_TOKENS + [str(odd_value(rng))]) for _ in range(rng.randint(0, 5)))
            lines.insert(pos, f"{command} {args}")
        else:
            data = mutate_bytes("\n".join(lines).encode(), rng)
            lines = data.decode("utf-8", "replace").splitlines()
    return "\n".join(lines) + "\n"


LOCATED_STF = re.compile(r"^fuzz\.stf:\d+: error: ")


def test_fuzz_stf_files_into_the_runner(stf_cases, capfd):
    from testbed.p4engine.stf import run_stf_text
    rng = make_rng("stf")
    corpus = _stf_lines()
    tally = Tally("STF files -> p4 test runner")
    for _ in Budget(800, share=0.25):
        name, program, seed_text = rng.choice(stf_cases)
        text = mutate_stf(seed_text, corpus, rng)
        tally.tried += 1
        out = io.StringIO()
        try:
            with hang_guard():
                status = run_stf_text(program.new_pipeline(), text, out=out, filename="fuzz.stf")
        except Hang:
            tally.hangs.append((text, name))
            continue
        except Exception as exc:  # noqa: BLE001 - what the fuzzer is looking for
            tally.crashes.append((text, f"{name}: {type(exc).__name__}: {exc}"))
            continue
        report = out.getvalue()
        unlocated = [l for l in report.splitlines() if "error:" in l and not LOCATED_STF.match(l)]
        if status not in (0, 1) or unlocated:
            tally.crashes.append((text, f"{name}: status {status}, unlocated {unlocated[:1]}"))
        _tracebacks(tally, capfd, text)
    tally.report()


# ============================================================ mutated P4 programs -> the compiler

P4_SEEDS = ["rt_parser_errors", "rt_tables_exact", "rt_externs", "rt_checksums", "parser_loops", "rt_hashes"]
P4_TOKEN = re.compile(r"\s+|//[^\n]*|/\*.*?\*/|\"[^\"\n]*\"|[A-Za-z_]\w*|\d+w\d+|0[xX][0-9a-fA-F]+|\d+|"
                      r"&&&|\.\.|<<|>>|\|\+\||\|-\||[=!<>]=|&&|\|\||\+\+|.", re.S)
P4_ODD = ["{", "}", "(", ")", ";", "<", ">", ",", ".", "[", "]", "=", ":", "?", "&&&", "..", "++", "<<", ">>",
          "0", "1", "4294967296", "9" * 40, "8w256", "0x", "bit<0>", "bit<9>", "int<1>", "varbit<7>", "state",
          "transition", "select", "accept", "reject", "start", "header", "struct", "extract", "advance",
          "lookahead<bit<8>>()", "apply", "table", "action", "control", "parser", "exit", "return", "default",
          "const", "typedef", "enum", "error", "#define X", "#include \"nope.p4\"", "#ifdef X", "#endif",
          '"', "/*", "@name(\"x\")", "@id(0)", "main", "V1Switch", "hdr", "meta", "standard_metadata", "_", "$",
          "\x00", "é", "x" * 300]


# tokens swapped for another of their kind: the program often still compiles, so its pipeline runs
P4_KINDS = [["exact", "ternary", "lpm", "range", "optional"], ["+", "-", "&", "|", "^", "*", "|+|", "|-|"],
            ["==", "!=", "<", ">", "<=", ">="], ["accept", "reject"], ["<<", ">>"], ["&&", "||"],
            ["mark_to_drop", "NoAction"], ["true", "false"]]


def mutate_p4(text, rng):
    tokens = P4_TOKEN.findall(text)
    for _ in range(rng.randint(1, 3)):
        if not tokens:
            tokens = [rng.choice(P4_ODD)]
        i = rng.randrange(len(tokens))
        pick = rng.random()
        kin = [k for k, t in enumerate(tokens) if any(t in kind for kind in P4_KINDS)]
        if pick < 0.25 and kin:
            k = rng.choice(kin)
            tokens[k] = rng.choice(next(kind for kind in P4_KINDS if tokens[k] in kind))
        elif pick < 0.4:
            tokens[i] = rng.choice(P4_ODD + tokens[max(0, i - 40):i + 40])
        elif pick < 0.55:                                        # a number changed: often compiles
            numbers = [k for k, t in enumerate(tokens) if t[:1].isdigit()] or [i]
            tokens[rng.choice(numbers)] = str(rng.choice([0, 1, 7, 8, 9, 16, 31, 32, 33, 64, 65, 255, 256,
                                                          511, 512, 4096, 65535, 2 ** 32, 2 ** 64, 10 ** 30]))
        elif pick < 0.65:
            del tokens[i:i + rng.randint(1, 3)]
        elif pick < 0.75:
            tokens.insert(i, rng.choice(P4_ODD))
        elif pick < 0.82:
            j = rng.randrange(len(tokens))
            tokens[i], tokens[j] = tokens[j], tokens[i]
        elif pick < 0.92:
            tokens[i:i] = tokens[i:i + rng.randint(1, 30)]      # a run duplicated
        else:
            tokens = tokens[:i]                                  # cut short
    return "".join(tokens)


LOCATED_P4 = re.compile(r"^[^\n:]+:[1-9]\d*:\d+: error: ")


def _random_frame(rng):
    frame = bytearray(rng.randrange(256) for _ in range(rng.choice([0, 1, 13, 14, 20, 34, 42, 64, 200])))
    if len(frame) >= 14 and rng.random() < 0.6:
        frame[12:14] = rng.choice([b"\x08\x00", b"\x90\x01", b"\x90\x02", b"\x90\x00", b"\x88\xcc"])
    return bytes(frame)


def test_fuzz_mutated_p4_programs_into_the_compiler(capfd):
    from testbed.p4engine import P4Error, P4RuntimeFault, compile_source
    rng = make_rng("p4")
    seeds = []
    for name in P4_SEEDS:
        with open(os.path.join(HERE, "p4", f"{name}.p4")) as f:
            seeds.append(f.read())
    tally = Tally("mutated P4 programs -> compiler and pipeline")
    compiled = located = 0
    for _ in Budget(60, share=0.35):
        text = mutate_p4(rng.choice(seeds), rng)
        tally.tried += 1
        try:
            with hang_guard():
                try:
                    program = compile_source(text, "fuzz.p4")
                    program.p4info           # P4Info is built lazily: its errors count too
                except P4Error as exc:
                    if LOCATED_P4.match(str(exc)):
                        located += 1
                    else:
                        tally.crashes.append((text, f"unlocated P4 error: {str(exc)[:200]}"))
                    continue
                compiled += 1
                pipeline = program.new_pipeline()
                for _ in range(4):
                    try:
                        pipeline.process(rng.randrange(8), _random_frame(rng))
                    except P4RuntimeFault:
                        pass                     # assert()/assume() failing: BMv2 aborts too
        except Hang:
            tally.hangs.append((text, "compile or packets"))
        except Exception as exc:  # noqa: BLE001 - what the fuzzer is looking for
            tally.crashes.append((text, f"{type(exc).__name__}: {exc}"))
        _tracebacks(tally, capfd, text)
    print(f"  ({compiled} compiled, {located} located errors)")
    tally.report()


# ============================================================ P4Runtime messages -> the engine server

@pytest.fixture(scope="module", params=["p4/fabric.p4", "tests/p4/rt_externs.p4", "tests/p4/rt_selector.p4"])
def p4rt_server(request):
    from testbed.p4engine import compile_file
    from testbed.p4rt.server import P4RuntimeServer
    from testbed.switch.datapath import Switch
    ports = {n: SocketPort(n) for n in (1, 2, 3, 4)}
    switch = Switch(ports, cpu_port=510)
    switch.start()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        addr = f"127.0.0.1:{s.getsockname()[1]}"
    program = compile_file(os.path.join(ROOT, request.param))
    server = P4RuntimeServer(switch, device_id=1, address=addr, compiler=lambda cfg: program).start()
    server.load_program(program)
    channel = grpc.insecure_channel(addr)
    stub = p4runtime_pb2_grpc.P4RuntimeStub(channel)
    stream_requests = __import__("queue").Queue()

    def feed():
        while True:
            item = stream_requests.get()
            if item is None:
                return
            yield item
    responses = stub.StreamChannel(feed())
    hello = p4runtime_pb2.StreamMessageRequest()
    hello.arbitration.device_id = 1
    hello.arbitration.election_id.low = 1
    stream_requests.put(hello)
    next(responses)
    yield {"stub": stub, "p4info": program.p4info, "switch": switch, "server": server, "addr": addr}
    stream_requests.put(None)
    channel.close()
    server.stop()
    switch.close()


def _random_bytes(rng, width, clean=False):
    pick = rng.random() * (0.5 if clean else 1)
    nbytes = (width + 7) // 8
    if pick < 0.5:
        return rng.randrange(1 << width).to_bytes(nbytes, "big")
    if pick < 0.6:
        return b""
    if pick < 0.8:
        return bytes(rng.randrange(256) for _ in range(rng.choice([1, nbytes + 1, nbytes + 8, 300])))
    return (1 << width).to_bytes(nbytes + 1, "big")


def _random_update(rng, p4info):
    """An update built from the P4Info: a clean one (valid ids, values that fit, so entries
    accumulate and later updates meet them) or a damaged one."""
    clean = rng.random() < 0.5
    update = p4runtime_pb2.Update(type=rng.choice([1, 1, 2, 3] if clean else [1, 1, 2, 3, 0, 7]))
    entity = update.entity
    present = {"member": p4info.action_profiles, "group": p4info.action_profiles, "counter": p4info.counters,
               "register": p4info.registers, "meter": p4info.meters, "digest": p4info.digests,
               "direct_counter": p4info.direct_counters, "direct_meter": p4info.direct_meters}
    kinds = ["table", "table", "table", "default", "member", "group", "counter", "register", "meter", "mc",
             "clone", "digest", "direct_counter", "direct_meter"]
    kind = rng.choice([k for k in kinds if not clean or k not in present or len(present[k])])
    if clean and kind in ("default", "counter", "register", "meter", "direct_counter", "direct_meter"):
        update.type = p4runtime_pb2.Update.MODIFY
    ids = lambda items: [x.preamble.id for x in items] or [0]  # noqa: E731
    if kind in ("table", "default", "direct_counter", "direct_meter"):
        table = rng.choice(list(p4info.tables))
        te = entity.table_entry if kind in ("table", "default") else (
            entity.direct_counter_entry.table_entry if kind == "direct_counter" else entity.direct_meter_entry.table_entry)
        te.table_id = table.preamble.id if clean or rng.random() < 0.9 else rng.randrange(1 << 32)
        te.is_default_action = kind == "default"
        for mf in table.match_fields:
            if rng.random() < 0.15 and (not clean or mf.match_type != 2):
                continue
            m = te.match.add(field_id=mf.id if clean or rng.random() < 0.95 else rng.randrange(10))
            which = mf.match_type if clean or rng.random() < 0.9 else rng.randrange(1, 6)
            width = mf.bitwidth
            small = lambda: rng.choice([0, 1, 2, 3, (1 << width) - 1])  # noqa: E731 - values that repeat
            if which == 2:
                m.exact.value = _random_bytes(rng, width) if not clean else small().to_bytes((width + 7) // 8, "big")
            elif which == 3:
                plen = rng.randrange(1, width + 1) if clean else rng.randrange(-2, width + 3)
                value = small() & ~((1 << max(0, width - plen)) - 1) if clean else 0
                m.lpm.value = value.to_bytes((width + 7) // 8, "big") if clean else _random_bytes(rng, width)
                m.lpm.prefix_len = plen
            elif which == 4:
                mask = rng.choice([1, (1 << width) - 1, 0xF0 & ((1 << width) - 1) or 1])
                m.ternary.value = (small() & mask).to_bytes((width + 7) // 8, "big") if clean \
                    else _random_bytes(rng, width)
                m.ternary.mask = mask.to_bytes((width + 7) // 8, "big") if clean else _random_bytes(rng, width)
            elif which == 5:
                low, high = sorted((small(), small()))
                m.range.low = low.to_bytes((width + 7) // 8, "big") if clean else _random_bytes(rng, width)
                m.range.high = high.to_bytes((width + 7) // 8, "big") if clean else _random_bytes(rng, width)
            else:
                m.optional.value = _random_bytes(rng, width, clean)
        if clean:
            te.priority = rng.randint(1, 3) if {m.match_type for m in table.match_fields} & {4, 5, 6} else 0
        else:
            te.priority = rng.choice([0, 1, 10, -1, 2 ** 31 - 1])
        if rng.random() < 0.9:
            action_id = rng.choice([ref.id for ref in table.action_refs] or [0])
            action = next((a for a in p4info.actions if a.preamble.id == action_id), None)
            choice = rng.random()
            if choice < 0.8:
                te.action.action.action_id = action_id
                for param in (action.params if action else []):
                    if clean or rng.random() < 0.95:
                        te.action.action.params.add(param_id=param.id,
                                                    value=_random_bytes(rng, param.bitwidth, clean))
            elif choice < 0.9:
                te.action.action_profile_member_id = rng.randrange(5)
            else:
                te.action.action_profile_group_id = rng.randrange(5)
        if rng.random() < 0.1:
            te.counter_data.packet_count = rng.randrange(1 << 63)
        if rng.random() < 0.1:
            te.meter_config.cir = rng.randrange(-5, 1 << 40)
            te.meter_config.pir = rng.randrange(-5, 1 << 40)
            te.meter_config.cburst = rng.randrange(-5, 1 << 20)
    elif kind == "member":
        m = entity.action_profile_member
        m.action_profile_id = rng.choice(ids(p4info.action_profiles))
        m.member_id = rng.randrange(5)
        action = rng.choice(list(p4info.actions))
        m.action.action_id = action.preamble.id
        for param in action.params:
            m.action.params.add(param_id=param.id, value=_random_bytes(rng, param.bitwidth, clean))
    elif kind == "group":
        g = entity.action_profile_group
        g.action_profile_id = rng.choice(ids(p4info.action_profiles))
        g.group_id = rng.randrange(5)
        g.max_size = rng.randrange(-1, 20)
        for _ in range(rng.randrange(4)):
            g.members.add(member_id=rng.randrange(6), weight=rng.randrange(-1, 4))
    elif kind in ("counter", "register", "meter"):
        items = {"counter": p4info.counters, "register": p4info.registers, "meter": p4info.meters}[kind]
        target = getattr(entity, f"{kind}_entry")
        setattr(target, f"{kind}_id", rng.choice(ids(items)))
        if rng.random() < 0.8:
            target.index.index = rng.choice([0, 1, -1, 7, 63, 64, 2 ** 40, -(2 ** 62)])
        if kind == "counter":
            target.data.byte_count = rng.randrange(1 << 63)
        elif kind == "register":
            target.data.bitstring = _random_bytes(rng, rng.choice([1, 8, 16, 32, 64]))
        else:
            target.config.cir, target.config.pir = rng.randrange(-3, 1 << 30), rng.randrange(-3, 1 << 30)
    elif kind in ("mc", "clone"):
        pre = entity.packet_replication_engine_entry
        entry = pre.multicast_group_entry if kind == "mc" else pre.clone_session_entry
        ids_ = [1, 2, 3] if clean else [0, 1, 2, 100, 2 ** 32 - 1]
        if kind == "mc":
            entry.multicast_group_id = rng.choice(ids_)
        else:
            entry.session_id = rng.choice(ids_)
            entry.packet_length_bytes = rng.choice([0, 1, 64, 2 ** 31 - 1])
        for i in range(rng.randrange(4)):
            r = entry.replicas.add(instance=i if clean else rng.choice([0, 1, 65535, 65536, 2 ** 32 - 1]))
            if clean or rng.random() < 0.7:
                r.egress_port = rng.choice([1, 2, 3, 4, 510] if clean else [0, 1, 2, 3, 4, 9, 510, 511, 2 ** 32 - 1])
            else:
                r.port = _random_bytes(rng, 32)
    else:
        entity.digest_entry.digest_id = rng.choice(ids(p4info.digests) + [rng.randrange(1 << 32)])
        entity.digest_entry.config.max_list_size = rng.randrange(-1, 10)
    if not clean and rng.random() < 0.3:          # protobuf-level damage, kept if it still parses
        try:
            update = p4runtime_pb2.Update.FromString(mutate_bytes(update.SerializeToString(), rng))
        except Exception:  # noqa: BLE001 - not a message any more: keep the undamaged one
            pass
    return update


def _mutated_p4info(rng, p4info):
    """The program's P4Info with a few structural faults (ids, names, widths, sizes, refs)."""
    info = type(p4info)()
    info.CopyFrom(p4info)
    objects = [o for group in (info.tables, info.actions, info.counters, info.registers, info.meters,
                               info.action_profiles, info.direct_counters, info.digests) for o in group]
    for _ in range(rng.randint(1, 3)):
        o = rng.choice(objects)
        pick = rng.randrange(8)
        if pick == 0:
            o.preamble.id = rng.choice([0, objects[0].preamble.id, 2 ** 32 - 1])
        elif pick == 1:
            o.preamble.name = rng.choice(["", objects[0].preamble.name, "x" * 1000])
        elif pick == 2 and info.tables and info.tables[0].match_fields:
            rng.choice(info.tables).match_fields[0].bitwidth = rng.choice([0, 1, 2 ** 31 - 1])
        elif pick == 3:
            for a in info.actions:
                for param in a.params:
                    param.bitwidth = rng.choice([0, min(param.bitwidth + 1, 2 ** 31 - 1), 2 ** 31 - 1])
        elif pick == 4 and info.tables:
            rng.choice(info.tables).action_refs.add(id=rng.randrange(2 ** 32))
        elif pick == 5:
            for group in (info.counters, info.registers, info.meters):
                for x in group:
                    x.size = rng.choice([-1, 0, 2 ** 31 - 1])
        elif pick == 6 and info.tables:
            rng.choice(info.tables).implementation_id = rng.randrange(2 ** 32)
        else:
            for r in info.registers:
                r.type_spec.Clear()
    return info


def _statuses(err):
    """Per-update canonical codes of a failed Write (empty if the error carries none)."""
    from google.rpc import status_pb2
    raw = dict(err.trailing_metadata() or ()).get("grpc-status-details-bin")
    if not raw:
        return []
    codes = []
    for detail in status_pb2.Status.FromString(raw).details:
        e = p4runtime_pb2.Error()
        detail.Unpack(e)
        codes.append(e.canonical_code)
    return codes


def test_fuzz_p4runtime_messages_into_the_engine_server(p4rt_server, capfd):
    from google.rpc import code_pb2
    rng = make_rng("p4runtime")
    stub, p4info = p4rt_server["stub"], p4rt_server["p4info"]
    tally = Tally("P4Runtime messages -> engine server")
    bad = {code_pb2.INTERNAL, code_pb2.UNKNOWN, code_pb2.DEADLINE_EXCEEDED}
    outcomes = {}
    for _ in Budget(120, share=0.08):
        tally.tried += 1
        code = None
        pick = rng.random()
        if pick < 0.7:
            req = p4runtime_pb2.WriteRequest(device_id=rng.choice([1, 1, 1, 0, 2]), role=rng.choice([""] * 8 + ["x"]))
            req.election_id.low = rng.choice([1] * 9 + [2])
            req.updates.extend(_random_update(rng, p4info) for _ in range(rng.randint(1, 4)))
            what = req
            try:
                stub.Write(req, timeout=RPC_HANG_SECONDS)
                outcomes["OK"] = outcomes.get("OK", 0) + 1
                continue
            except grpc.RpcError as err:
                code = err.code()
                per_update = _statuses(err)
                for c in per_update:
                    name = code_pb2.Code.Name(c)
                    outcomes["update " + name] = outcomes.get("update " + name, 0) + 1
        elif pick < 0.9:
            req = p4runtime_pb2.ReadRequest(device_id=rng.choice([1, 1, 1, 2]))
            for _ in range(rng.randint(1, 3)):
                entity = _random_update(rng, p4info).entity
                req.entities.append(entity)
            what = req
            try:
                list(stub.Read(req, timeout=RPC_HANG_SECONDS))
                continue
            except grpc.RpcError as err:
                code, per_update = err.code(), []
        elif pick < 0.95:
            req = p4runtime_pb2.SetForwardingPipelineConfigRequest(
                device_id=1, action=p4runtime_pb2.SetForwardingPipelineConfigRequest.VERIFY)
            req.election_id.low = 1
            req.config.p4info.CopyFrom(_mutated_p4info(rng, p4info))
            req.config.p4_device_config = b"(the fixture's compiler returns the loaded program)"
            what = req.config.p4info
            try:
                stub.SetForwardingPipelineConfig(req, timeout=RPC_HANG_SECONDS)
                continue
            except grpc.RpcError as err:
                code, per_update = err.code(), []
        else:
            req = p4runtime_pb2.GetForwardingPipelineConfigRequest(device_id=rng.choice([1, 3]),
                                                                   response_type=rng.randrange(-1, 6))
            what = req
            try:
                stub.GetForwardingPipelineConfig(req, timeout=RPC_HANG_SECONDS)
                continue
            except grpc.RpcError as err:
                code, per_update = err.code(), []
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            tally.hangs.append((what, "no answer"))
        elif code == grpc.StatusCode.INTERNAL or (code == grpc.StatusCode.UNKNOWN and not per_update):
            tally.crashes.append((what, f"{code}: {err.details()}"))
        elif bad & set(per_update):
            tally.crashes.append((what, f"per-update codes {per_update}: {err.details()}"))
        _tracebacks(tally, capfd, what)
        if code is not None:
            outcomes[code.name] = outcomes.get(code.name, 0) + 1
    # still serving afterwards
    assert stub.Capabilities(p4runtime_pb2.CapabilitiesRequest(), timeout=HANG_SECONDS).p4runtime_api_version
    print(f"  (answers: {', '.join(f'{k} {v}' for k, v in sorted(outcomes.items()))})")
    tally.report()


def _random_stream_message(rng, p4info):
    req = p4runtime_pb2.StreamMessageRequest()
    pick = rng.random()
    if pick < 0.5:
        arb = req.arbitration
        arb.device_id = rng.choice([1, 1, 0, 2, 2 ** 64 - 1])
        if rng.random() < 0.8:
            arb.election_id.high = rng.choice([0, 0, 1, 2 ** 64 - 1])
            arb.election_id.low = rng.choice([0, 1, 2, 5, 2 ** 64 - 1])
        if rng.random() < 0.3:
            arb.role.name = rng.choice(["", "x", "cli", "\x00", "r" * 1000])
    elif pick < 0.9:
        packet = req.packet
        packet.payload = bytes(rng.randrange(256) for _ in range(rng.choice([0, 1, 14, 64, 1500, 10000])))
        header = next((h for h in p4info.controller_packet_metadata if h.preamble.name == "packet_out"), None)
        for m in (header.metadata if header else []):
            if rng.random() < 0.8:
                packet.metadata.add(metadata_id=m.id if rng.random() < 0.9 else rng.randrange(9),
                                    value=_random_bytes(rng, m.bitwidth))
    elif pick < 0.95:
        req.digest_ack.digest_id = rng.randrange(1 << 32)
        req.digest_ack.list_id = rng.randrange(1 << 64)
    else:
        req.other.type_url = "x"
    return req


def test_fuzz_stream_messages_into_the_engine_server(p4rt_server, capfd):
    """StreamChannel messages: a stream may end with an error, never INTERNAL, never hang."""
    import queue
    rng = make_rng("p4runtime-stream")
    tally = Tally("StreamChannel messages -> engine server")
    for _ in Budget(20, share=0.02):
        tally.tried += 1
        channel = grpc.insecure_channel(p4rt_server["addr"])
        requests = queue.Queue()

        def feed():
            while True:
                item = requests.get()
                if item is None:
                    return
                yield item
        call = p4runtime_pb2_grpc.P4RuntimeStub(channel).StreamChannel(feed(), timeout=HANG_SECONDS)
        messages = [_random_stream_message(rng, p4rt_server["p4info"]) for _ in range(rng.randint(1, 4))]
        if rng.random() < 0.7:                   # mostly arbitrate first, as clients do
            hello = p4runtime_pb2.StreamMessageRequest()
            hello.arbitration.device_id = 1
            hello.arbitration.election_id.low = rng.choice([0, 2, 3])
            messages.insert(0, hello)
        for m in messages:
            requests.put(m)
        requests.put(None)
        try:
            for _ in call:
                pass
            code = grpc.StatusCode.OK
        except grpc.RpcError as err:
            code = err.code()
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            tally.hangs.append((messages, "stream did not end"))
        elif code in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN):
            tally.crashes.append((messages, f"{code}: {call.details()}"))
        channel.close()
        _tracebacks(tally, capfd, messages)
    assert p4rt_server["stub"].Capabilities(p4runtime_pb2.CapabilitiesRequest(),
                                            timeout=HANG_SECONDS).p4runtime_api_version
    tally.report()


# ============================================================ requests -> the switch agent

VALID_AGENT_REQUESTS = [
    {"op": "ports"},
    {"op": "set_port_rate", "args": {"port": 1, "rate_bps": 1000000}},
    {"op": "set_queue_depth", "args": {"port": 2, "depth": 16, "priority": 3}},
    {"op": "set_impairments", "args": {"port": 1, "delay_us": 10.0, "jitter_us": 1.0, "loss": 0.0}},
    {"op": "set_pfc", "args": {"port": 1, "priorities": [3, 4]}},
    {"op": "queue_depth", "args": {"port": 1, "priority": 0}},
    {"op": "pause_state", "args": {"port": 2}},
    {"op": "port_counters", "args": {"port": 1}},
    {"op": "mirroring_add", "args": {"session": 5, "port": 2}},
    {"op": "mirroring_delete", "args": {"session": 5}},
]


def test_fuzz_requests_into_the_switch_agent(capfd):
    from testbed.p4engine import compile_file
    from testbed.switch.agent import AgentServer, EngineAgent, answer
    from testbed.switch.datapath import Switch
    rng = make_rng("agent")
    switch = Switch({n: SocketPort(n) for n in (1, 2)})
    switch.set_pipeline(compile_file(os.path.join(HERE, "p4", "rt_tables_exact.p4")).new_pipeline())
    agent = EngineAgent(switch)
    server = AgentServer(agent, "127.0.0.1:0").start()
    sock = socket.create_connection(("127.0.0.1", int(server.address.rsplit(":", 1)[1])), timeout=HANG_SECONDS)
    stream = sock.makefile("rwb")
    tally = Tally("requests -> switch agent")
    try:
        for i in Budget(1500, share=0.1):
            base = rng.choice(VALID_AGENT_REQUESTS)
            pick = rng.random()
            if pick < 0.6:
                try:
                    line = json.dumps(mutate_tree(base, rng)).encode()
                except (ValueError, RecursionError):
                    line = b"[" * 5000
            elif pick < 0.9:
                line = mutate_bytes(json.dumps(base).encode(), rng)
            else:
                line = json.dumps(odd_value(rng), default=str).encode()
            line = line.replace(b"\n", b" ") + b"\n"
            tally.tried += 1
            if i % 10 == 0:          # through the socket: the connection must survive every request
                try:
                    stream.write(line)
                    stream.flush()
                    reply = json.loads(stream.readline())
                except (OSError, ValueError) as exc:
                    tally.crashes.append((line, f"socket: {type(exc).__name__}: {exc}"))
                    break
            else:
                try:
                    with hang_guard():
                        reply = answer(agent, line)
                except Hang:
                    tally.hangs.append((line, "answer"))
                    continue
                except Exception as exc:  # noqa: BLE001 - what the fuzzer is looking for
                    tally.crashes.append((line, f"{type(exc).__name__}: {exc}"))
                    continue
            if not isinstance(reply, dict) or not isinstance(reply.get("ok"), bool) or (
                    not reply["ok"] and str(reply.get("error", "")).startswith("internal error")):
                tally.crashes.append((line, f"reply {str(reply)[:200]}"))
            _tracebacks(tally, capfd, line)
    finally:
        stream.close()
        sock.close()
        server.stop()
        switch.close()
    tally.report()
