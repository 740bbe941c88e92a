/* core.p4 for the rocelab embedded P4_16 engine.
 * Declares the P4_16 core library with the same names and types as the
 * language specification's core.p4 (written for this engine). */
#ifndef _CORE_P4_
#define _CORE_P4_

/* Standard parser errors, in the order the spec lists them. */
error {
    NoError,
    PacketTooShort,
    NoMatch,
    StackOutOfBounds,
    HeaderTooShort,
    ParserTimeout,
    ParserInvalidArgument
}

/* The packet being parsed. */
extern packet_in {
    void extract<T>(out T hdr);
    void extract<T>(out T variableSizeHeader, in bit<32> variableFieldSizeInBits);
    T lookahead<T>();
    void advance(in bit<32> sizeInBits);
    bit<32> length();
}

/* The packet being built by a deparser. */
extern packet_out {
    void emit<T>(in T hdr);
}

/* Signal a parser error when check is false. */
extern void verify(in bool check, in error toSignal);

/* The action that does nothing. */
@noWarn("unused")
action NoAction() {}

/* The match kinds every architecture provides. */
match_kind {
    exact,
    ternary,
    lpm
}

extern bool static_assert(bool check, string message);
extern bool static_assert(bool check);

#endif
