"""The engine's own bounds on what a program may ask for, so that a typo or a hostile program
gets a located error instead of exhausting the machine's memory or time (a `bit<4294967296>`,
a header stack of a billion headers, `register<bit<32>>(10**12)`, `1 << 10**11`).

They are far above what real v1model programs use (BMv2 programs rarely exceed bit<128>
fields, stacks of a few dozen headers or registers of a million cells).
"""

MAX_BIT_WIDTH = 1 << 16          # bit<W>, int<W>, varbit<W> and literal widths (8 KB of bits)
MAX_STACK_SIZE = 1 << 12         # headers in one header stack
MAX_EXTERN_SIZE = 1 << 22        # cells of a register/counter/meter, members of an action profile
MAX_CONST_SHIFT = MAX_BIT_WIDTH  # `<<` of compile-time constants (beyond: 0 for bit<W>, an error else)
MAX_LITERAL_DIGITS = 4000        # decimal digits of an integer literal (Python's own limit is 4300)
