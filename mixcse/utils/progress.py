"""Progress of a long loop, visible wherever the output goes.

``Progress(total, desc, unit)`` is a tqdm bar when stderr is a terminal; otherwise (``nohup``, CI, a log file) it
prints a plain line at most every ``every_seconds`` and once at the end, e.g.

    train: 125/250 steps (50%), loss 0.0123, dev 74.10, 110.2 sentences/s, elapsed 1m05s, ETA 1m05s

Interface: ``update(n=1, **fields)`` advances and sets the fields shown after the count (the latest value of each
is kept); ``write(message)`` prints a result line (to stdout) that never lands on the bar; ``close()`` ends it
(the non-TTY form prints its last line then). ``enabled=False`` makes all three silent except ``write``, which
still prints. ``eta``: a function giving the seconds left (or None), shown instead of the bar's own estimate, which
knows only the rate of the count (a training run adds the evaluations still to come).
Usable as a context manager.
"""

from __future__ import annotations

import sys
import time
from typing import IO, Any, Callable


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


def _value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1 else f"{value:.2f}"
    return str(value)


class Progress:
    def __init__(self, total: int | None, desc: str, unit: str = "it", *, initial: int = 0, enabled: bool = True,
                 every_seconds: float = 30.0, stream: IO[str] | None = None, tty: bool | None = None,
                 eta: Callable[[], float | None] | None = None, clock: Callable[[], float] = time.perf_counter):
        self.total, self.desc, self.unit = total, desc, unit
        self.count = self._start_count = initial
        self.enabled = enabled
        self.every_seconds = every_seconds
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.fields: dict[str, Any] = {}
        self.eta, self.clock = eta, clock
        self._start = self._last_print = clock()
        self._bar = None
        self._closed = False
        if enabled and self.tty:
            from tqdm.auto import tqdm

            own_eta = {} if eta is None else {"bar_format": "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]"}
            self._bar = tqdm(total=total, initial=initial, desc=desc, unit=unit, file=self.stream,
                             dynamic_ncols=True, **own_eta)

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def update(self, n: int = 1, **fields: Any) -> None:
        self.count += n
        self.fields.update({k: v for k, v in fields.items() if v is not None})
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.update(n)
            if fields or self.eta is not None:
                shown = {k: _value(v) for k, v in self.fields.items()}
                if self.eta is not None and (left := self.eta()) is not None:
                    shown["ETA"] = _clock(left)
                self._bar.set_postfix(shown, refresh=False)
            return
        now = self.clock()
        if now - self._last_print >= self.every_seconds:
            self._print_line(now)

    def write(self, message: str, file: IO[str] | None = None) -> None:
        """A result line (stdout unless ``file``), printed above the bar rather than onto it."""
        file = file if file is not None else sys.stdout
        if self._bar is not None:
            self._bar.write(message, file=file)
        else:
            print(message, file=file, flush=True)

    def line(self, now: float | None = None) -> str:
        """The plain progress line (what a non-terminal sees)."""
        now = self.clock() if now is None else now
        elapsed = now - self._start
        done = self.count - self._start_count
        parts = [f"{self.count}/{self.total} {self.unit}" if self.total else f"{self.count} {self.unit}"]
        if self.total:
            parts[0] += f" ({100.0 * self.count / self.total:.0f}%)"
        parts += [f"{k} {_value(v)}" for k, v in self.fields.items()]
        if done and elapsed > 0:
            rate = done / elapsed
            parts.append(f"{rate:.1f} {self.unit}/s" if rate >= 1 else f"{1 / rate:.1f} s/{self.unit.rstrip('s')}")
        parts.append(f"elapsed {_clock(elapsed)}")
        if self.eta is not None:
            if self.count < (self.total or 0) and (left := self.eta()) is not None:
                parts.append(f"ETA {_clock(left)}")
        elif self.total and done and self.count < self.total:
            parts.append(f"ETA {_clock(elapsed / done * (self.total - self.count))}")
        return f"{self.desc}: " + ", ".join(parts)

    def _print_line(self, now: float) -> None:
        self._last_print = now
        print(self.line(now), file=self.stream, flush=True)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._bar is not None:
            self._bar.close()
        elif self.enabled and self.count > self._start_count:
            self._print_line(self.clock())
