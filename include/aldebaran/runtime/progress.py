"""Progress of long work (loadgen, bench, chaos campaigns, replays): count, rate and ETA.

On an interactive terminal it is a rich progress bar (rich is already installed with Airflow and pinned in
constraints.txt); elsewhere — CI, Airflow task logs, a pipe — it is a plain log line at most every
`every` seconds, written when the count moves (no thread of its own):

    loadgen → trades: 400,000/1,000,000 events (40%), 40,000/s, elapsed 0:00:10, ETA 0:00:15

    with Progress("loadgen", total=len(recs), unit="events") as bar:
        for batch in batches:
            ...
            bar.advance(len(batch))

    for section in track(sections, "bench", unit="sections"):
        ...

Bars opened while another is live (a loadgen preload inside a bench section) share one display: the
inner bar shows below the outer one and goes away when its work is done. While a bar is live, log
lines written to the terminal print above it instead of tearing it.

Which mode: `terminal=True/False`; by default a bar when stderr is a TTY rich can draw on (not "dumb";
rich's TTY_INTERACTIVE=0 turns bars off), or when the caller's rich `console` says it is interactive.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import Callable, Iterable, Iterator, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

# The one live rich display of this process, shared by nested bars (rich allows one at a time).
_lock = threading.Lock()
_live = None  # rich.progress.Progress while a bar is shown
_live_users = 0
_rerouted: dict = {}  # logging handler -> the stream it wrote to before the display started


def duration(seconds: float) -> str:
    """`h:mm:ss`, like rich's elapsed and remaining columns."""
    whole = max(0, int(round(seconds)))
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"


def estimate(completed: float, total: float | None, elapsed: float) -> tuple[float, float | None]:
    """(items per second, seconds left) from the average since the start; no ETA without a total or a rate."""
    rate = completed / elapsed if elapsed > 0 else 0.0
    eta = max(0.0, total - completed) / rate if total and rate > 0 else None
    return rate, eta


def rate_text(per_second: float) -> str:
    """Items per second, or per minute for slow work (kills in a campaign)."""
    if per_second >= 1 or per_second == 0:
        return f"{per_second:,.0f}/s"
    return f"{per_second * 60:,.1f}/min"


def interactive(console=None) -> bool:
    """Whether a bar can be drawn: the caller's `console` decides; else stderr must be a TTY and rich able
    to draw on it. FORCE_COLOR alone (set in some CI) makes rich call any stream a terminal: a log is not."""
    if console is not None:
        return console.is_interactive
    from rich.console import Console

    try:
        tty = sys.stderr.isatty()
    except (AttributeError, ValueError):  # no stream, or a closed one
        return False
    return tty and Console(stderr=True).is_interactive


class Progress:
    """Count, rate and ETA of one piece of work; a context manager.

    `total` may be unknown (None): then no percentage and no ETA. `advance(n)` and `update(completed)`
    are cheap enough to call every few thousand items of a hot loop."""

    def __init__(self, description: str, total: int | None = None, *, unit: str = "items", every: float = 10.0,
                 terminal: bool | None = None, logger: logging.Logger | None = None, console=None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if every <= 0:
            raise ValueError(f"every must be > 0 seconds, got {every}")
        self.description = description
        self.total = total
        self.unit = unit
        self.every = every
        self.terminal = terminal
        self.logger = logger or log
        self.console = console
        self.clock = clock
        self.completed = 0
        self._started = 0.0
        self._last_line = 0.0
        self._task = None  # the rich task id in bar mode
        self._mutex = threading.Lock()

    # --- the context (or start/close, where a `with` would re-indent a long loop) -------------------
    def start(self) -> "Progress":
        self._started = self._last_line = self.clock()
        if self.terminal is None:  # inside a live bar, a bar too
            self.terminal = _live is not None or interactive(self.console)
        if self.terminal:
            self._task = _open_task(self.console, self.description, self.total, self.unit)
        return self

    def close(self) -> None:
        """End the bar (idempotent); plain mode has nothing to end."""
        if self._task is not None:
            _close_task(self._task)
            self._task = None

    def __enter__(self) -> "Progress":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    # --- reporting -------------------------------------------------------------------------------
    def advance(self, n: int = 1) -> None:
        with self._mutex:
            self.completed += n
            self._report()

    def update(self, completed: int, total: int | None = None) -> None:
        """Set the count (and the total, once it is known)."""
        with self._mutex:
            self.completed = completed
            if total is not None:
                self.total = total
            self._report()

    def _report(self) -> None:
        if self._task is not None:
            _live.update(self._task, completed=self.completed, total=self.total)
            return
        now = self.clock()
        if now - self._last_line >= self.every:
            self._last_line = now
            self.logger.info("%s", self.line(now))

    def line(self, now: float | None = None) -> str:
        """The plain progress line: count (of total, percent), rate, elapsed and ETA."""
        elapsed = (self.clock() if now is None else now) - self._started
        rate, eta = estimate(self.completed, self.total, elapsed)
        parts = [f"{self.description}: {self.completed:,}"]
        if self.total:
            parts[0] += f"/{self.total:,} {self.unit} ({100 * self.completed / self.total:.0f}%)"
        else:
            parts[0] += f" {self.unit}"
        parts += [rate_text(rate), f"elapsed {duration(elapsed)}"]
        if eta is not None:
            parts.append(f"ETA {duration(eta)}")
        return ", ".join(parts)


def track(items: Iterable[T], description: str, total: int | None = None, **kwargs) -> Iterator[T]:
    """Iterate `items`, counting each one (total: `len(items)` when it has one). Keyword arguments as
    :class:`Progress`."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    with Progress(description, total, **kwargs) as bar:
        for item in items:
            yield item
            bar.advance()


# --- the shared rich display -----------------------------------------------------------------------
def _columns():
    """Description, bar, count of total, rate, ETA: about 80 columns (a longer description is cut)."""
    from rich.progress import BarColumn, ProgressColumn, TextColumn
    from rich.table import Column
    from rich.text import Text

    class CountColumn(ProgressColumn):
        def render(self, task) -> Text:
            of = f"/{int(task.total):,}" if task.total is not None else ""
            return Text(f"{int(task.completed):,}{of} {task.fields['unit']}", style="progress.download")

    # Rate and ETA from the average since the start, as in the plain lines (rich's own estimate looks
    # only at the last 30 s, and has nothing to go on for work that advances once a minute).
    class RateColumn(ProgressColumn):
        def render(self, task) -> Text:
            rate, _ = estimate(task.completed, task.total, task.elapsed or 0.0)
            return Text(rate_text(rate), style="progress.data.speed")

    class EtaColumn(ProgressColumn):
        max_refresh = 0.5

        def render(self, task) -> Text:
            _, eta = estimate(task.completed, task.total, task.elapsed or 0.0)
            return Text("ETA " + (duration(eta) if eta is not None else "-:--:--"), style="progress.remaining")

    fixed = {"no_wrap": True}
    return (TextColumn("[progress.description]{task.description}",
                       table_column=Column(max_width=22, no_wrap=True, overflow="ellipsis")),
            BarColumn(bar_width=12), CountColumn(table_column=Column(**fixed)),
            RateColumn(table_column=Column(**fixed)), EtaColumn(table_column=Column(**fixed)))


def _open_task(console, description: str, total: int | None, unit: str):
    global _live, _live_users
    from rich.console import Console
    from rich.progress import Progress as RichProgress

    with _lock:
        if _live is None:
            _live = RichProgress(*_columns(), console=console or Console(stderr=True))
            _live.start()
            _reroute_logging(_live.console)
        _live_users += 1
        return _live.add_task(description, total=total, unit=unit)


def _close_task(task) -> None:
    global _live, _live_users
    with _lock:
        _live_users -= 1
        if _live_users:
            _live.remove_task(task)  # an inner bar: gone once its work is done
            return
        live, _live = _live, None
    _restore_logging()
    live.stop()  # the last bar: its final state stays on screen


def _reroute_logging(console) -> None:
    """Send the log handlers that write to this terminal through the display's stderr proxy (rich's Live
    puts one in sys.stderr), so a log line prints above the bars; `_restore_logging` puts them back."""
    from rich.file_proxy import FileProxy

    proxy = sys.stderr
    if not isinstance(proxy, FileProxy):
        return
    for handler in logging.getLogger().handlers:
        # Exactly StreamHandler: files and test capture handlers (subclasses) keep their streams.
        if type(handler) is logging.StreamHandler and handler.stream in (console.file, sys.__stderr__):
            _rerouted[handler] = handler.setStream(proxy)


def _restore_logging() -> None:
    for handler, stream in list(_rerouted.items()):
        handler.setStream(stream)
    _rerouted.clear()
