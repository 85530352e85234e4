"""Progress lines: at most one per interval plus the last; a short sub-phase may stay quiet."""

from corpus_assets.domain.core.progress import Progress


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_lines_per_interval_and_the_final_line():
    clock, lines = Clock(), []
    p = Progress(lines.append, "phase", total=10, interval=5.0, clock=clock)
    for i in range(1, 11):
        clock.t += 1.0
        p.update(i)
    p.finish()
    assert len(lines) == 3 and lines[-1].endswith("(done)")
    assert lines[-1].startswith("phase: 10/10 records (100.0%), 1 records/s")


def test_a_short_quiet_phase_logs_nothing_and_a_long_or_reported_one_logs_its_end():
    clock, lines = Clock(), []
    fast = Progress(lines.append, "fast", total=3, clock=clock, quiet_below=2.0)
    clock.t += 1.9
    fast.update(3)
    fast.finish()
    assert lines == []
    slow = Progress(lines.append, "slow", total=3, clock=clock, quiet_below=2.0)
    clock.t += 2.0
    slow.update(3)
    slow.finish()
    assert [x.split(":")[0] for x in lines] == ["slow"] and lines[0].endswith("(done)")
    lines.clear()
    reported = Progress(lines.append, "reported", total=3, interval=0.5, clock=clock, quiet_below=2.0)
    clock.t += 0.6
    reported.update(1)  # a line on the way: its end is logged too, however short the phase
    reported.finish()
    assert len(lines) == 2 and lines[1].endswith("(done)")
    lines.clear()
    default = Progress(lines.append, "default", clock=clock)
    default.finish()
    assert len(lines) == 1  # without quiet_below every phase logs its end
