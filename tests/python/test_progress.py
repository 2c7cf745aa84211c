"""kiln.progress: the progress bars of make coverage / bench / fuzz and of
compiles over a second. Drawn only on a terminal (or with KILN_PROGRESS=1),
silent otherwise. Every test drives a fake clock and a fake stream: nothing
here waits or depends on how fast the machine is."""

import io

import pytest
import torch

import kiln
from kiln import progress
from kiln.progress import Progress


class Tty(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self):
        return True


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


@pytest.fixture(autouse=True)
def no_env(monkeypatch):
    monkeypatch.delenv("KILN_PROGRESS", raising=False)
    monkeypatch.delenv("KILN_LOG", raising=False)


def test_silent_when_not_a_terminal():
    out = io.StringIO()
    with Progress(10, "work", stream=out, clock=Clock()) as p:
        assert not p.enabled
        for _ in range(10):
            p.update()
        p.stage("a stage")
    assert out.getvalue() == ""


def test_drawn_on_a_terminal_and_cleared_at_the_end():
    out, clock = Tty(), Clock()
    p = Progress(10, "work", stream=out, clock=clock, interval=0)
    assert p.enabled
    clock.t += 5
    p.update(5, status="5 done")
    text = out.getvalue()
    assert text.startswith("\r\033[K") and "work  50%|##########          | 5/10" in text
    assert "[00:05<00:05, 1.0/s] 5 done" in text
    p.close()
    assert out.getvalue().endswith("\r\033[K")


def test_environment_overrides_the_terminal_test(monkeypatch):
    monkeypatch.setenv("KILN_PROGRESS", "0")
    assert not Progress(stream=Tty()).enabled
    monkeypatch.setenv("KILN_PROGRESS", "1")
    assert Progress(stream=io.StringIO()).enabled


def test_one_bar_per_terminal(monkeypatch):
    """A drawn bar turns bars off for the work under it (nested compiles,
    child processes) and gives the setting back when closed."""
    import os

    monkeypatch.setenv("KILN_PROGRESS", "1")
    outer = Progress(stream=Tty())
    assert outer.enabled and os.environ["KILN_PROGRESS"] == "0"
    assert not Progress(stream=Tty()).enabled
    outer.close()
    assert os.environ["KILN_PROGRESS"] == "1"
    monkeypatch.delenv("KILN_PROGRESS")
    with Progress(stream=Tty()):
        assert os.environ["KILN_PROGRESS"] == "0"
    assert "KILN_PROGRESS" not in os.environ


def test_delay_hides_a_short_task_and_interval_limits_redraws():
    out, clock = Tty(), Clock()
    p = Progress(desc="kiln: compiling M", stream=out, clock=clock, delay=1.0, interval=0.25)
    p.stage("export")
    clock.t += 0.9
    p.stage("lowering")
    assert out.getvalue() == ""          # under a second: nothing drawn
    clock.t += 0.2
    p.stage("pass fold")
    assert out.getvalue() == "\r\033[Kkiln: compiling M [00:01] pass fold"
    p.close()
    q = Progress(100, stream=Tty(), clock=clock, interval=0.25)
    q.update()                           # first draw
    drawn = q.stream.getvalue()
    clock.t += 0.1
    q.update()                           # within the interval: not redrawn
    assert q.stream.getvalue() == drawn
    q.update(98)                         # the last step always draws
    assert "100/100" in q.stream.getvalue()


def test_write_prints_above_the_bar(capsys):
    out, clock = Tty(), Clock()
    p = Progress(4, "rows", stream=out, clock=clock, interval=0)
    p.update()
    p.write("a result line")
    assert capsys.readouterr().out == "a result line\n"
    # Cleared before the line, drawn again after it.
    assert out.getvalue().count("1/4") == 2 and "\r\033[K\r\033[K" in out.getvalue()
    p.close()


def test_line_without_total_and_width():
    clock = Clock()
    p = Progress(desc="bench", stream=Tty(), clock=clock)
    clock.t += 75
    assert p.line(200) == "bench [01:15]"
    p.update(3, status="MiniLM @ 2t")
    assert p.line(200) == "bench 3 [01:15] MiniLM @ 2t"
    assert len(p.line(12)) == 11


def test_compile_reports_its_stages(monkeypatch):
    """kiln.trace names its stages, the C compiler each pass as it starts
    (through the progress callable) and the memory plan; with KILN_LOG=1
    (pass lines on stderr) no bar is made."""
    seen = []
    monkeypatch.setattr(Progress, "stage", lambda self, s: seen.append(s))
    monkeypatch.setenv("KILN_PROGRESS", "1")
    lin = torch.nn.Linear(8, 4).eval()
    x = torch.randn(2, 8)
    torch.testing.assert_close(kiln.trace(lin, x)(x), lin(x).detach())
    assert seen[:3] == ["export", "lowering", "compile"], seen
    assert {"pass fold", "pass simplify", "pass fuse_gemm", "pass pack"} <= set(seen), seen
    assert seen[-1] == "memory plan"
    seen.clear()
    monkeypatch.setenv("KILN_LOG", "1")
    kiln.trace(lin, x)
    assert seen == []
    assert progress._current.get() is None


def test_fuzz_runner_uses_the_helper(monkeypatch, capsys):
    """make fuzz's progress line is this helper's (its --progress flag maps
    to enabled): drawn with --progress on, nothing with off."""
    import sys
    import pathlib

    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "fuzz"))
    from kilnfuzz import runner

    made = []
    real = Progress

    def spy(*a, **kw):
        p = real(*a, **kw)
        made.append(p)
        return p

    monkeypatch.setattr(runner, "Progress", spy)
    assert runner.main(["--n", "2", "--jobs", "0", "--progress", "off", "--seed", "3"]) == 0
    assert made and made[-1].enabled is False and made[-1].total == 2
    assert runner.main(["--n", "1", "--jobs", "0", "--progress", "on", "--seed", "3"]) == 0
    assert made[-1].enabled is True and made[-1].n == 1
    assert "1/1" in capsys.readouterr().err
