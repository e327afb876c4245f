"""The overview's chart, drawn on the server as inline SVG: no script, no library.

Bars are jobs finished per minute over the last hour (succeeded below, failed
stacked above, in red); the line is the failure rate per minute (failed /
finished), on its own 0-100 % scale at the right.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from chit.jobs import MinuteCount, State

WIDTH, HEIGHT = 720, 180
LEFT, RIGHT, TOP, BOTTOM = 44, 44, 12, 26
MINUTES = 60


@dataclass(frozen=True, slots=True)
class Bar:
    x: float
    width: float
    ok_y: float
    ok_height: float
    failed_y: float
    failed_height: float
    title: str


@dataclass(frozen=True, slots=True)
class Chart:
    """Everything the template needs to draw it; coordinates in SVG units."""

    width: int
    height: int
    bars: list[Bar]
    rate_points: str  # polyline points, "x,y x,y ..."
    y_max: int
    plot_left: int
    plot_right: int
    plot_top: int
    plot_bottom: int
    x_labels: list[tuple[float, str]]
    succeeded: int
    failed: int

    @property
    def empty(self) -> bool:
        return self.succeeded + self.failed == 0


def per_minute(minutes: list[MinuteCount], now: datetime) -> list[tuple[datetime, int, int]]:
    """(minute, succeeded, failed) for each of the last 60 minutes, oldest first,
    ending with the current minute; kinds summed."""
    last = now.replace(second=0, microsecond=0)
    slots = {last - timedelta(minutes=i): [0, 0] for i in range(MINUTES)}
    for m in minutes:
        slot = slots.get(m.minute)
        if slot is not None:
            slot[0 if m.state is State.SUCCEEDED else 1] += m.count
    return [(minute, ok, bad) for minute, (ok, bad) in sorted(slots.items())]


def draw(minutes: list[MinuteCount], now: datetime) -> Chart:
    series = per_minute(minutes, now)
    plot_w = WIDTH - LEFT - RIGHT
    plot_h = HEIGHT - TOP - BOTTOM
    y_max = _nice(max((ok + bad for _, ok, bad in series), default=0))
    step = plot_w / len(series)
    bars, points = [], []
    for i, (minute, ok, bad) in enumerate(series):
        x = LEFT + i * step
        ok_h = plot_h * ok / y_max
        bad_h = plot_h * bad / y_max
        base = TOP + plot_h
        title = f"{minute:%H:%M} UTC: {ok} succeeded, {bad} failed"
        bars.append(
            Bar(
                x=round(x + step * 0.12, 2),
                width=round(step * 0.76, 2),
                ok_y=round(base - ok_h, 2),
                ok_height=round(ok_h, 2),
                failed_y=round(base - ok_h - bad_h, 2),
                failed_height=round(bad_h, 2),
                title=title,
            )
        )
        if ok + bad:
            rate = bad / (ok + bad)
            points.append(f"{x + step / 2:.2f},{base - plot_h * rate:.2f}")
    labels = [
        (LEFT + i * step, f"-{MINUTES - i} min" if i < len(series) else "now")
        for i in range(0, len(series) + 1, 15)
    ]
    return Chart(
        width=WIDTH,
        height=HEIGHT,
        bars=bars,
        rate_points=" ".join(points),
        y_max=y_max,
        plot_left=LEFT,
        plot_right=WIDTH - RIGHT,
        plot_top=TOP,
        plot_bottom=TOP + plot_h,
        x_labels=labels,
        succeeded=sum(ok for _, ok, _ in series),
        failed=sum(bad for _, _, bad in series),
    )


def _nice(value: int) -> int:
    """A round number at least `value` (and at least 1) for the top of the scale."""
    if value <= 5:
        return 5
    magnitude = 10 ** (len(str(value)) - 1)
    for factor in (1, 2, 2.5, 5, 10):
        top = int(factor * magnitude)
        if top >= value:
            return top
    return 10 * magnitude
