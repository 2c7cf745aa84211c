"""Progress bars for kiln's long work: `make coverage`, `make bench`, `make
fuzz`, and any compile that takes over a second (kiln.trace,
torch.compile(backend="kiln")).

A bar is one line on stderr, redrawn in place, drawn only when stderr is a
terminal: piped or captured output (CI logs, pytest, `make test > log`) gets
nothing from it. KILN_PROGRESS=0 turns bars off on a terminal too,
KILN_PROGRESS=1 draws them anywhere. tqdm-like:

    fuzz  37%|#######             | 740/2000 [00:28<00:47, 26.4/s] 738 passed, 0 failed ...

without a total it shows the count, the elapsed time and the current stage:

    kiln: compiling BertModel [00:03] lowering

One bar per terminal: while a bar is drawn it sets KILN_PROGRESS=0, so the
work under it (a compile inside `make coverage`, the worker processes of
`make bench` and `make fuzz`) draws no bar of its own over it; closing the
bar restores the variable.

Lines the program prints while a bar is up go through ``Progress.write``,
which clears the bar, prints the line (stdout by default) and draws the bar
again below it. A bar made with ``delay`` stays hidden until that much time
has passed (compiles: 1 s, so a quick compile prints nothing), and with
``ticker`` a daemon thread redraws it every ``interval`` seconds, so the
elapsed time moves while one long step runs. The clock is a parameter, and
``line()`` is the text a draw would write, so tests check what is drawn
without waiting for anything.

kiln's own module: the bars kiln needs are a few dozen lines, not worth a
dependency (tqdm) in kiln's requirements.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import shutil
import sys
import threading
import time

from kiln.capture import log_enabled

__all__ = ["Progress", "compile_progress", "compile_stage", "enabled_for"]


def enabled_for(stream):
    """Whether a bar on `stream` is drawn: KILN_PROGRESS=0/1 decides, else
    whether the stream is a terminal."""
    env = os.environ.get("KILN_PROGRESS", "")
    if env in ("0", "1"):
        return env == "1"
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # closed or not a file
        return False


def _clock_text(seconds):
    seconds = int(max(seconds, 0))
    h, rest = divmod(seconds, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60:02d}:{rest % 60:02d}"


class Progress:
    """A progress line on `stream` (default stderr).

    total: the number of steps (None: no bar, a count). desc: the words in
    front. enabled: None decides by enabled_for(stream). delay: seconds
    before the first draw. interval: the least time between draws from
    update() (the last step always draws). ticker: redraw from a thread
    every interval (only when enabled). clock: a monotonic clock (tests
    give a fake one)."""

    BAR = 20

    def __init__(self, total=None, desc="", *, stream=None, enabled=None, delay=0.0,
                 interval=0.25, ticker=False, clock=time.monotonic):
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled_for(self.stream) if enabled is None else bool(enabled)
        self.total, self.desc, self.delay, self.interval = total, desc, delay, interval
        self.clock = clock
        self.n = 0
        self.status = ""
        self.start = clock()
        self._last = None      # when the line was last drawn (None: never)
        self._drawn = False    # a bar is on the screen now
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread = None
        self._env = None
        if self.enabled:  # one bar per terminal (see the module's text)
            self._env = (os.environ.get("KILN_PROGRESS"),)
            os.environ["KILN_PROGRESS"] = "0"
        if self.enabled and ticker:
            self._thread = threading.Thread(target=self._tick, name="kiln-progress", daemon=True)
            self._thread.start()

    # ---- what is drawn -------------------------------------------------------
    def line(self, width=None):
        """The line a draw writes now (without the carriage return)."""
        elapsed = self.clock() - self.start
        head = f"{self.desc} " if self.desc else ""
        if self.total:
            frac = min(max(self.n / self.total, 0.0), 1.0)
            fill = int(frac * self.BAR)
            rate = self.n / elapsed if elapsed > 0 else 0.0
            eta = (self.total - self.n) / rate if rate > 0 else None
            text = (f"{head}{100 * frac:3.0f}%|{'#' * fill}{' ' * (self.BAR - fill)}| "
                    f"{self.n}/{self.total} [{_clock_text(elapsed)}<"
                    f"{_clock_text(eta) if eta is not None else '?'}, {rate:.1f}/s]")
        elif self.n:
            text = f"{head}{self.n} [{_clock_text(elapsed)}]"
        else:
            text = f"{head}[{_clock_text(elapsed)}]"
        if self.status:
            text += " " + self.status
        width = width if width is not None else shutil.get_terminal_size((100, 20)).columns
        return text[:max(width - 1, 10)]

    def _draw(self, force=False):
        if not self.enabled:
            return
        with self._lock:
            now = self.clock()
            if now - self.start < self.delay:
                return
            if not force and self._last is not None and now - self._last < self.interval:
                return
            self._last = now
            self.stream.write("\r\033[K" + self.line())
            self.stream.flush()
            self._drawn = True

    def _clear(self):
        if self._drawn:
            self.stream.write("\r\033[K")
            self.stream.flush()
            self._drawn = False

    def _tick(self):
        while not self._stop.wait(self.interval):
            self._draw(force=True)

    # ---- what callers do -----------------------------------------------------
    def update(self, n=1, status=None):
        """Advances by n steps (and sets the status text when given)."""
        with self._lock:
            self.n += n
            if status is not None:
                self.status = status
            self._draw(force=self.total is not None and self.n >= self.total)

    def stage(self, status):
        """Sets the status text (a compile's stage, the model being timed)."""
        with self._lock:
            self.status = status
            self._draw(force=True)

    def write(self, text, file=None):
        """Prints a line (to stdout by default) above the bar."""
        with self._lock:
            self._clear()
            print(text, file=file if file is not None else sys.stdout, flush=True)
            if self._last is not None:
                self._draw(force=True)

    def close(self):
        """Stops the ticker, clears the bar and gives KILN_PROGRESS back."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            self._clear()
            if self._env is not None:
                old, self._env = self._env[0], None
                if old is None:
                    os.environ.pop("KILN_PROGRESS", None)
                else:
                    os.environ["KILN_PROGRESS"] = old

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ---- compiles ----------------------------------------------------------------

_current = contextvars.ContextVar("kiln_compile_progress", default=None)


@contextlib.contextmanager
def compile_progress(what):
    """The bar of one compile (nested compiles share the outermost one):
    hidden for its first second, then "kiln: compiling <what> [mm:ss]
    <stage>" until it ends. Off with KILN_LOG=1, whose pass lines stay as
    they are."""
    outer = _current.get()
    if outer is not None:
        yield outer
        return
    p = Progress(desc=f"kiln: compiling {what}", delay=1.0, interval=0.25, ticker=True,
                 enabled=False if log_enabled() else None)
    token = _current.set(p)
    try:
        yield p
    finally:
        _current.reset(token)
        p.close()


def compile_stage(name):
    """Names the current compile's stage (export, lowering, a C pass...)."""
    p = _current.get()
    if p is not None and p.enabled:
        p.stage(name)


def compile_pass_callback():
    """What the C compiler calls with each pass's name, or None when no bar
    is drawn (then C makes no call back into Python)."""
    p = _current.get()
    if p is None or not p.enabled:
        return None
    return lambda name: p.stage("memory plan" if name == "plan" else "pass " + name)
