"""The seeds a virtual-time lab runs by default. Each seed is a sweep point
(testbed/sweep/labpoint.py): a pure function of its arguments (virtual time is deterministic
per seed), so where and in which order the seeds run never changes their results."""


def default_seeds(count):
    """Seeds 1..count (seed 0 is the controller's unseeded default, kept for `rocelab run`)."""
    return list(range(1, int(count) + 1))
