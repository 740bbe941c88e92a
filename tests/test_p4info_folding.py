"""P4Info leaves out what p4c's front end folds away before it writes the P4Info: tables and
actions reachable only through a constant-false branch (`if (false)`, `false ? a : b`,
`false && x`, a switch on a constant), and control instances nothing live applies.
The folding rules are p4c's (frontends/common/constantFolding.cpp, frontends/p4/
strengthReduction.cpp, simplifySwitch.cpp, unusedDeclarations.cpp); packets are unchanged."""
from test_p4engine_accept import frame, program   # the same one-Ethernet-header v1model program
from testbed.p4engine import compile_source


def sent(compiled, data):
    """The one frame the program sends for `data` (it sets no egress port: port 0)."""
    [(port, out)] = compiled.new_pipeline().process(0, data)
    assert port == 0
    return bytes(out)


def names(entities):
    return {e.preamble.name for e in entities}


def tables_decl(*names_):
    return "\n".join(f"action mark_{n}() {{ hdr.eth.src = 1; }}\n"
                     f"table {n} {{ key = {{ hdr.eth.dst : exact; }} actions = {{ mark_{n}; NoAction; }} }}"
                     for n in names_)


def test_tables_and_actions_only_in_constant_false_branches_are_left_out():
    src = program(tables_decl("live", "dead_else", "dead_if", "dead_mux", "dead_and", "dead_or",
                              "dead_reduced", "kept_side_effect", "kept_after") + """
        action called_live() { hdr.eth.type = hdr.eth.type + 1; }
        action called_dead() { hdr.eth.type = 0; }
        apply {
            if (true) { live.apply(); called_live(); } else { dead_else.apply(); called_dead(); }
            if (false) { dead_if.apply(); }
            hdr.eth.dst = false ? (dead_mux.apply().hit ? 48w1 : 48w2) : hdr.eth.dst;
            if (false && dead_and.apply().hit) { called_dead(); }
            if (true || dead_or.apply().hit) { hdr.eth.src = 5; }
            // p4c's strength reduction: (x && false) is false when x has no side effects ...
            if (hdr.eth.isValid() && false) { dead_reduced.apply(); }
            // ... but a table apply is a side effect: neither of these goes
            if (kept_side_effect.apply().hit && false) { kept_after.apply(); }
        }""")
    compiled = compile_source(src, "folding.p4")
    info = compiled.p4info
    assert names(info.tables) == {"I.live", "I.kept_side_effect", "I.kept_after"}
    assert names(info.actions) == {"I.mark_live", "I.mark_kept_side_effect", "I.mark_kept_after",
                                   "I.called_live", "NoAction"}
    data = sent(compiled, frame(0x0800))
    # the live branch ran (type + 1), the dead ones did not (type 0); src = 5 from the '||' branch
    assert data[12:14] == (0x0801).to_bytes(2, "big")
    assert data[6:12] == (5).to_bytes(6, "big")


def test_switch_on_a_constant_keeps_only_the_case_p4c_keeps():
    src = program(tables_decl("s1", "s2", "s3", "sd", "t1", "t2") + """
        apply {
            switch (K) {
                1: { s1.apply(); }
                2:
                3: { s3.apply(); hdr.eth.type = 3; }
                default: { sd.apply(); }
            }
            switch (hdr.eth.type) {          // not constant: both stay
                1: { t1.apply(); }
                default: { t2.apply(); }
            }
        }""", decls="const bit<8> K = 2;")
    compiled = compile_source(src, "switch.p4")
    assert names(compiled.p4info.tables) == {"I.s3", "I.t1", "I.t2"}      # 2 falls through to 3's body
    assert sent(compiled, frame(0x0800))[12:14] == (3).to_bytes(2, "big")


def test_control_instances_nothing_live_applies_lose_their_tables_and_externs():
    decls = """
control Sub(inout headers_t hdr) {
    counter(8, CounterType.packets) hits;
    action set(bit<16> v) { hdr.eth.type = v; }
    table st { key = { hdr.eth.dst : exact; } actions = { set; NoAction; } }
    apply { st.apply(); hits.count(0); }
}
control Flagged(inout headers_t hdr)(bool on) {
    action on_a() { hdr.eth.type = 0x0101; }
    action off_a() { hdr.eth.type = 0x0202; }
    table on_t { key = { hdr.eth.dst : exact; } actions = { on_a; } }
    table off_t { key = { hdr.eth.dst : exact; } actions = { off_a; } }
    apply { if (on) { on_t.apply(); } else { off_t.apply(); } }
}"""
    src = program("""
        Sub() used_sub;
        Sub() dead_sub;
        Sub() unused_sub;
        Flagged(true) flagged;
        apply {
            used_sub.apply(hdr);
            if (false) { dead_sub.apply(hdr); }
            flagged.apply(hdr);
        }""", decls)
    info = compile_source(src, "subs.p4").p4info
    # after inlining, p4c folds the constructor argument: only on_t survives in 'flagged'
    assert names(info.tables) == {"I.used_sub.st", "I.flagged.on_t"}
    assert names(info.actions) == {"I.used_sub.set", "I.flagged.on_a", "NoAction"}
    assert names(info.counters) == {"I.used_sub.hits"}          # externs go with their instance


def test_folded_branches_keep_their_effects_and_drop_the_dead_ones():
    decls = """
bit<16> bump(inout bit<16> x) { x = x + 1; return x; }
bool touch(inout bit<48> x) { x = 0xEE; return true; }"""
    src = program("""
        apply {
            hdr.eth.type = true ? bump(hdr.eth.type) : 16w0;      // the live side runs once
            hdr.eth.type = false ? bump(hdr.eth.type) : hdr.eth.type;
            if (false && touch(hdr.eth.src)) { hdr.eth.type = 0; }
            if (true && touch(hdr.eth.dst)) { hdr.eth.type = hdr.eth.type + 0x10; }
        }""", decls)
    data = sent(compile_source(src, "effects.p4"), frame(0x0800))
    assert data[0:6] == (0xEE).to_bytes(6, "big")          # touch(dst) ran
    assert data[6:12] == (1).to_bytes(6, "big")            # touch(src) did not
    assert data[12:14] == (0x0811).to_bytes(2, "big")      # one bump, then + 0x10
