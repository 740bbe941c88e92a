"""Running one lab point per seed.

A point is a pure function of its arguments (virtual time is deterministic per seed), so
where and in which order the points run never changes their results. Today they run here,
one after another; `rocelab sweep` (Dask, issue #19) takes this function's place when it
lands, with the same contract: `run_points(point, seeds) -> [point(seed) for seed in seeds]`.
"""


def run_points(point, seeds):
    """[point(seed) for seed in seeds], in seed order."""
    return [point(seed) for seed in seeds]


def default_seeds(count):
    """Seeds 1..count (seed 0 is the controller's unseeded default, kept for `rocelab run`)."""
    return list(range(1, int(count) + 1))
