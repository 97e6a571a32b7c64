"""Where a run's time goes, and an ETA that counts the evaluations still to come.

``Timeline`` adds up the seconds of each phase of one ``mixcse train`` call -- ``train`` (batches, steps, logging),
``select`` (candidates scored on the selection data), ``guard`` (the forgetting guard), ``test`` (held-out pairs)
and ``other`` (loading, checkpoints, best/, the summary) -- with ``with timeline.phase(name):``; a phase entered
inside another pauses the outer one, so no second is counted twice. ``breakdown()`` is what summary.json records
(its parts add up to the call's wall time but for the few statements between phases). ``eta()`` is the training
bar's: the steps left at the rate of the steps so far, plus the scorings still to come at the mean duration of the
ones so far (the start model's scoring measures them before the first step).
"""

from __future__ import annotations

import contextlib
from time import perf_counter

PHASES = ("train", "select", "guard", "test", "other")


class Timeline:
    def __init__(self, clock=None):
        self.clock = clock or perf_counter
        self.started = self.clock()
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self.counts = dict.fromkeys(PHASES, 0)
        self._open: list[list] = []  # [phase, since] of the phases entered and not yet left, innermost last

    @contextlib.contextmanager
    def phase(self, name: str):
        if name not in self.seconds:
            raise ValueError(f"unknown phase {name!r}; one of {', '.join(PHASES)}")
        now = self.clock()
        if self._open:  # pause the outer phase
            outer = self._open[-1]
            self.seconds[outer[0]] += now - outer[1]
        self._open.append([name, now])
        try:
            yield
        finally:
            now = self.clock()
            _, since = self._open.pop()
            self.seconds[name] += now - since
            self.counts[name] += 1
            if self._open:
                self._open[-1][1] = now

    def wall(self) -> float:
        return self.clock() - self.started

    def mean(self, name: str) -> float | None:
        """Mean seconds of one ``name`` phase; an open one (the step being logged) counts with its time so far."""
        seconds, count = self.seconds[name], self.counts[name]
        if self._open and self._open[-1][0] == name:
            seconds, count = seconds + self.clock() - self._open[-1][1], count + 1
        return seconds / count if count else None

    def eta(self, *, steps_left: int, scorings_left: int, tests_left: int, guards: int = 1) -> float | None:
        """Seconds until the run ends: None until a training step has been timed. A scoring is costed as the
        selection data and every guard (a guard is asked only of a candidate that would be kept: an upper bound)."""
        per_step = self.mean("train")
        if per_step is None:
            return None
        per_scoring = (self.mean("select") or 0.0) + (self.mean("guard") or 0.0) * guards
        return per_step * steps_left + per_scoring * scorings_left + (self.mean("test") or 0.0) * tests_left

    def breakdown(self) -> dict[str, float]:
        """{phase: seconds} of this call so far, to the millisecond."""
        return {name: round(self.seconds[name], 3) for name in PHASES}

    def line(self, wall: float | None = None) -> str:
        wall = self.wall() if wall is None else wall
        return (f"time: {wall:.0f}s wall = " + ", ".join(f"{name} {self.seconds[name]:.0f}s" for name in PHASES)
                + f" (unaccounted {wall - sum(self.seconds.values()):.0f}s)")
