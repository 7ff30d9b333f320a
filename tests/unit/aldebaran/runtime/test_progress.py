"""aldebaran.runtime.progress in both modes: plain log lines (not a terminal: CI, Airflow task logs) and the rich
bar (a terminal, forced here with a rich Console on a buffer). Also the replay's range size and progress
hook (aldebaran.platform.replay). No services."""

from __future__ import annotations

import io
import logging
from types import SimpleNamespace

import pytest
from rich.console import Console

from aldebaran.runtime import progress
from aldebaran.platform.replay import bounded_progress, range_size
from aldebaran.runtime.progress import Progress, track

LOGGER = "aldebaran.test_progress"


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


def plain(description: str, total: int | None, clock: FakeClock, **kwargs) -> Progress:
    return Progress(description, total, terminal=False, logger=logging.getLogger(LOGGER), clock=clock, **kwargs)


def terminal_console() -> Console:
    return Console(file=io.StringIO(), force_terminal=True, force_interactive=True, color_system=None, width=150)


# --- plain mode -------------------------------------------------------------------------------------
def test_plain_lines_every_interval_with_count_rate_and_eta(caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    clock = FakeClock()
    with plain("loadgen → trades", 1000, clock, unit="events", every=10.0) as bar:
        clock.now += 1
        bar.update(100)  # 1 s in: no line yet
        clock.now += 9
        bar.update(400)  # 10 s in: 40/s, 600 left → 15 s
        clock.now += 5
        bar.update(700)  # 5 s after the last line: none
        clock.now += 5
        bar.update(1000)
    assert lines(caplog) == [
        "loadgen → trades: 400/1,000 events (40%), 40/s, elapsed 0:00:10, ETA 0:00:15",
        "loadgen → trades: 1,000/1,000 events (100%), 50/s, elapsed 0:00:20, ETA 0:00:00",
    ]


def test_plain_line_without_a_total_has_no_percentage_and_no_eta(caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    clock = FakeClock()
    with plain("replay-x", None, clock, unit="events", every=10.0) as bar:
        clock.now += 10
        bar.advance(2_500)
    assert lines(caplog) == ["replay-x: 2,500 events, 250/s, elapsed 0:00:10"]


def test_slow_work_reports_a_rate_per_minute(caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    clock = FakeClock()
    with plain("kill-auditor", 20, clock, unit="kills") as bar:
        for _ in range(3):
            clock.now += 100 / 3
            bar.advance()
    # 3 kills in 100 s: 1.8 a minute; 17 left at 0.03/s → 567 s
    assert lines(caplog)[-1] == "kill-auditor: 3/20 kills (15%), 1.8/min, elapsed 0:01:40, ETA 0:09:27"
    assert len(lines(caplog)) == 3  # each kill came more than 10 s after the previous line


def test_track_counts_each_item(caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    clock = FakeClock()
    seen = []
    for section in track(["drain", "latency", "books"], "bench", unit="sections", terminal=False,
                         logger=logging.getLogger(LOGGER), clock=clock):
        clock.now += 60
        seen.append(section)
    assert seen == ["drain", "latency", "books"]
    assert lines(caplog) == [
        "bench: 1/3 sections (33%), 1.0/min, elapsed 0:01:00, ETA 0:02:00",
        "bench: 2/3 sections (67%), 1.0/min, elapsed 0:02:00, ETA 0:01:00",
        "bench: 3/3 sections (100%), 1.0/min, elapsed 0:03:00, ETA 0:00:00",
    ]


def test_plain_mode_draws_nothing():
    with Progress("quiet", 10, terminal=False) as bar:
        bar.advance(10)
    assert progress._live is None


@pytest.mark.parametrize("seconds, text", [(0, "0:00:00"), (59.6, "0:01:00"), (3_725, "1:02:05"), (-3, "0:00:00")])
def test_duration(seconds, text):
    assert progress.duration(seconds) == text


def test_every_must_be_positive():
    with pytest.raises(ValueError, match="every must be > 0"):
        Progress("x", every=0)


# --- terminal mode ----------------------------------------------------------------------------------
def test_terminal_bar_shows_count_of_total_and_eta_and_no_log_lines(caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    console = terminal_console()
    with Progress("loadgen → trades", 1000, unit="events", every=0.001, console=console,
                  logger=logging.getLogger(LOGGER)) as bar:
        assert bar.terminal is True
        bar.update(1000)
    out = console.file.getvalue()
    assert "loadgen → trades" in out and "1,000/1,000 events" in out and "ETA 0:00:00" in out
    assert lines(caplog) == []  # the bar replaces the plain lines
    assert progress._live is None


def test_bar_columns_fit_80_characters_with_count_rate_and_eta():
    from rich.progress import Progress as RichProgress

    console = Console(file=io.StringIO(), width=80, color_system=None)
    bars = RichProgress(*progress._columns(), console=console, get_time=lambda: 110.0)
    for description, total, done, unit in [("loadgen → scratch-progress-9763", 25_000, 12_773, "events"),
                                           ("kill-auditor", 20, 3, "kills"), ("replay-x", None, 3_000, "events")]:
        task = bars.add_task(description, total=total, unit=unit)
        bars.update(task, completed=done)
        bars.tasks[-1].start_time = 100.0  # 10 s ago
    console.print(bars.get_renderable())
    assert [line.rstrip() for line in console.file.getvalue().splitlines()] == [
        "loadgen → scratch-pro… ━━━━━━       12,773/25,000 events 1,277/s  ETA 0:00:10",
        "kill-auditor           ━╸           3/20 kills           18.0/min ETA 0:00:57",
        "replay-x               ━━━━━━━━━━━━ 3,000 events         300/s    ETA -:--:--",
    ]


def test_terminal_detection_follows_the_console():
    assert progress.interactive(terminal_console()) is True
    assert progress.interactive(Console(file=io.StringIO())) is False  # a buffer is no terminal
    assert Progress("x", console=Console(file=io.StringIO())).start().terminal is False


def test_a_log_is_no_terminal_even_with_force_color(monkeypatch):
    monkeypatch.setenv("FORCE_COLOR", "1")  # some CI set it; rich then calls any stream a terminal
    monkeypatch.setattr("sys.stderr", io.StringIO())
    assert progress.interactive() is False
    assert Progress("ci", 10).start().terminal is False


def test_nested_bars_share_one_display_and_the_inner_one_goes_when_done():
    console = terminal_console()
    with Progress("bench", 2, unit="sections", console=console) as outer:
        live = progress._live
        with Progress("loadgen", 50, unit="events") as inner:  # joins the live display
            assert progress._live is live and progress._live_users == 2
            inner.update(50)
            assert [t.description for t in live.tasks] == ["bench", "loadgen"]
        assert [t.description for t in live.tasks] == ["bench"]
        outer.advance(2)
    assert progress._live is None and progress._live_users == 0


def test_log_lines_print_above_the_bar_and_handlers_get_their_stream_back():
    console = terminal_console()
    handler = logging.StreamHandler(console.file)  # a handler on the bar's terminal
    handler.setFormatter(logging.Formatter("%(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        with Progress("work", 3, console=console) as bar:
            assert handler.stream is not console.file  # routed through the display
            logging.getLogger(LOGGER).warning("a log line during the bar")
            bar.advance(3)
        assert handler.stream is console.file
    finally:
        root.removeHandler(handler)
    assert "a log line during the bar" in console.file.getvalue()


def test_the_bar_closes_when_the_work_fails():
    console = terminal_console()
    with pytest.raises(RuntimeError):
        with Progress("failing", 5, console=console):
            raise RuntimeError("boom")
    assert progress._live is None and progress._live_users == 0


# --- replays ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("starting, ending, size", [
    ('{"trades": {"0": 120, "1": 95}}', '{"trades": {"0": 200, "1": 100}}', 85),
    ('{"trades": {"0": 0}}', '{"trades": {"0": 0}}', 0),
    ("earliest", '{"trades": {"0": 10}}', None),
    ('{"trades": {"0": 0}}', "latest", None),
    ('{"trades": {"0": -2}}', '{"trades": {"0": 10}}', None),  # Spark's "earliest" in JSON
    ('{"trades": {"0": 0}}', '{"trades": {"0": 5, "1": 5}}', None),  # a partition without a start
    ('{"trades": {"0": 0}}', None, None),
])
def test_range_size(starting, ending, size):
    assert range_size(starting, ending) == size


def test_bounded_progress_only_for_bounded_runs(monkeypatch, caplog):
    streaming = SimpleNamespace(trigger="processing-time", starting_offsets="earliest", ending_offsets=None,
                                query_name="auditor")
    with bounded_progress(streaming) as on_batch:
        assert on_batch is None

    clock = FakeClock()

    class Clocked(Progress):  # the real helper on a fake clock
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs, clock=clock)

    monkeypatch.setattr(progress, "Progress", Clocked)
    caplog.set_level(logging.INFO, logger="aldebaran.platform.replay")
    bounded = SimpleNamespace(trigger="available-now", starting_offsets='{"t": {"0": 0, "1": 0}}',
                              ending_offsets='{"t": {"0": 30, "1": 10}}', query_name="replay-1")
    with bounded_progress(bounded) as on_batch:
        clock.now += 60  # the JVM and the Spark session start: not counted
        on_batch({"batch_id": 0, "applied": 6, "duplicates": 1, "dlq": 3, "alerts": 3, "opened": 4})
        clock.now += 10
        on_batch({"batch_id": 1, "applied": 18, "duplicates": 0, "dlq": 2, "alerts": 1, "opened": 9})
        clock.now += 5
        on_batch({"batch_id": 2, "applied": 10, "duplicates": 0, "dlq": 0, "alerts": 0, "opened": 2})
    # Valid (applied or duplicate) and DLQ messages count; 30 of 40 in 10 s: 3/s, 10 left → 3 s
    assert [r.getMessage() for r in caplog.records if r.name == "aldebaran.platform.replay"] == [
        "replay-1: 30/40 events (75%), 3/s, elapsed 0:00:10, ETA 0:00:03",
    ]
    assert progress._live is None  # plain lines, never a bar (the driver shares its terminal with the JVM)
