"""Shared pieces of the fuzz tests: the time budget, the tally, and value/byte mutators.

In `make test` every fuzzer tries a fixed, seeded number of inputs (a few seconds).
With ROCELAB_FUZZ_SECONDS set (`make fuzz`), that many seconds are shared by the fuzzers
of one file, each running until its share is used.
"""
import os
import random
import time

FUZZ_SECONDS = float(os.environ.get("ROCELAB_FUZZ_SECONDS") or 0)
SEED = int(os.environ.get("ROCELAB_FUZZ_SEED") or 1601)


class Budget:
    """Iterate inputs: `short` of them, or for `share` of ROCELAB_FUZZ_SECONDS in long mode."""

    def __init__(self, short, share=1.0):
        self.short = short
        self.seconds = FUZZ_SECONDS * share
        self.long = self.seconds > 0

    def __iter__(self):
        if not self.long:
            yield from range(self.short)
            return
        deadline = time.monotonic() + self.seconds
        i = 0
        while time.monotonic() < deadline or i < self.short:
            yield i
            i += 1


class Tally:
    """Inputs tried and what went wrong, printed as the fuzzer's figure."""

    def __init__(self, name):
        self.name = name
        self.tried = 0
        self.crashes = []      # (input, what)
        self.hangs = []
        self.tracebacks = []
        self.started = time.monotonic()

    def figure(self):
        return (f"fuzz {self.name}: {self.tried} inputs in {time.monotonic() - self.started:.1f} s; "
                f"crashes {len(self.crashes)}, hangs {len(self.hangs)}, tracebacks {len(self.tracebacks)}")

    def report(self):
        print(self.figure())
        for kind in ("crashes", "hangs", "tracebacks"):
            for item, what in getattr(self, kind)[:3]:
                print(f"  {kind[:-1] if kind != 'crashes' else 'crash'}: {what} <- {item!r:.300}")
        assert (len(self.crashes), len(self.hangs), len(self.tracebacks)) == (0, 0, 0), self.figure()


# Values that break naive validation: wrong types, non-finite and huge numbers, odd text.
ODD_VALUES = [None, True, False, 0, -1, 1, 2 ** 31, 2 ** 63, 2 ** 64 + 1, 10 ** 30, -(10 ** 30), 0.5, -0.0, 1e308,
              3.7, 1.0, 65535, 65536, 511, 512, "", "0", "1", "abc", "1e400", "NaN", "Infinity", "-1", "0x10",
              "\u0000", "\udcff".encode("utf-8", "surrogateescape").decode("utf-8", "replace"), "a" * 5000,
              [], [1], [[[]]], {}, {"a": 1}, {"": None}, "10.0.0.1", "10.1.3.0/24", "::1", "02:00:00:00:00:01",
              "leaf1", "h1-eth0"]
# JSON text constants Python's json accepts but JSON does not, and numbers it cannot convert.
NON_JSON_NUMBERS = ["NaN", "Infinity", "-Infinity", "1e400", "-1e400", "9" * 5000, "-" + "1" * 4400]


def odd_value(rng):
    pick = rng.random()
    if pick < 0.7:
        return rng.choice(ODD_VALUES)
    if pick < 0.8:
        depth = rng.choice([5, 50, 400])  # deeper ones are built as text: deep_json_text
        return nested(depth, rng.choice([list, dict]))
    if pick < 0.9:
        return rng.uniform(-1e6, 1e6)
    return rng.randrange(-(2 ** 70), 2 ** 70)


def nested(depth, kind=list):
    value = 1
    for _ in range(depth):
        value = [value] if kind is list else {"k": value}
    return value


def deep_json_text(depth, kind=list):
    """Nesting too deep for a recursive encoder: built as text."""
    return ("[" * depth + "]" * depth) if kind is list else ('{"k":' * depth + "1" + "}" * depth)


# Nodes deeper than this are not picked: inside an odd value's 400-deep nest, a second nest
# made the tree too deep for the next copy.deepcopy (a RecursionError in the fuzzer itself).
MUTATE_DEPTH = 12


def mutate_tree(value, rng):
    """A copy of the JSON value `value` with one node changed, deleted or added."""
    import copy
    tree = copy.deepcopy(value)
    paths = []

    def walk(node, path):
        paths.append(path)
        if len(path) >= MUTATE_DEPTH:
            return
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, path + (k,))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, path + (i,))
    walk(tree, ())
    path = rng.choice(paths[1:] or paths)
    if not path:
        return odd_value(rng)
    parent = tree
    for step in path[:-1]:
        parent = parent[step]
    action = rng.random()
    if action < 0.75:
        parent[path[-1]] = odd_value(rng)
    elif action < 0.9:
        del parent[path[-1]]
    elif isinstance(parent, dict):
        parent[rng.choice(["extra", "sizes", "nic", "ranks", "x" * 100])] = odd_value(rng)
    else:
        parent.append(odd_value(rng))
    return tree


def mutate_bytes(data, rng):
    """`data` with a few bytes flipped, inserted, deleted or the text cut short."""
    data = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        action = rng.random()
        pos = rng.randrange(len(data) + 1)
        if action < 0.3 and data:
            data[min(pos, len(data) - 1)] = rng.randrange(256)
        elif action < 0.55:
            data[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif action < 0.75 and data:
            del data[pos:pos + rng.randint(1, 16)]
        elif action < 0.85:
            data = data[:pos]
        else:
            data[pos:pos] = rng.choice(NON_JSON_NUMBERS).encode()
    return bytes(data)


def make_rng(name):
    return random.Random(f"{SEED}:{name}")
