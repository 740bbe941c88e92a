"""Rates as people read them: a lab's links run megabits, virtual time's run the paper's
hundreds of gigabits ("400 Gb/s", not "400000 Mb/s")."""


def rate_unit(mbps):
    """("Gb/s", 1000) for rates of a gigabit and more, else ("Mb/s", 1): the divisor turns Mb/s
    into the unit."""
    return ("Gb/s", 1000.0) if mbps >= 1000 else ("Mb/s", 1.0)


def rate_text(mbps, fmt="{:g}"):
    """`mbps` in the unit that reads best: rate_text(400000) == "400 Gb/s", rate_text(10) == "10 Mb/s"."""
    unit, per = rate_unit(mbps)
    return f"{fmt.format(mbps / per)} {unit}"
