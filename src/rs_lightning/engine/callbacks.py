"""Training callbacks of the engine: the progress display and the checkpoints on SIGTERM and
on a wall-clock period."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytorch_lightning as pl
from pytorch_lightning.callbacks import Checkpoint
from pytorch_lightning.utilities.exceptions import SIGTERMException


class CheckpointOnSigterm(pl.Callback):
    """Save ``path`` when SIGTERM stops the run (a scheduler's time limit or preemption,
    ``kill``, ``scancel``), so that no update is lost: the same command resumes from it.

    Lightning turns SIGTERM into ``SIGTERMException`` at the end of a training step, after
    that step's callbacks, so the saved state is the one a periodic checkpoint of that step
    holds."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                     exception: BaseException) -> None:

        if isinstance(exception, SIGTERMException):
            trainer.save_checkpoint(self.path)


class CheckpointEveryMinutes(Checkpoint):
    """Replace ``path`` every ``minutes`` of training, so that a kill no SIGTERM announces
    (``kill -9``, a lost node) loses at most that much of a run however slow its updates.

    A :class:`~pytorch_lightning.callbacks.Checkpoint`, which Lightning calls after the other
    callbacks: the state saved at an update holds that update's periodic evaluation, as a
    periodic checkpoint of that step does, and resumes exactly as one."""

    def __init__(self, path: Path, minutes: float) -> None:
        self.path = Path(path)
        self.seconds = 60.0 * minutes
        self._saved_at = time.monotonic()

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._saved_at = time.monotonic()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if time.monotonic() - self._saved_at >= self.seconds:
            trainer.save_checkpoint(self.path)
            self._saved_at = time.monotonic()


def compact_number(value: float) -> str:
    """Three significant digits without a leading zero or a padded exponent: 0.55 -> .55,
    -0.104 -> -.104, 12345.6 -> 1.23e4."""
    text = f"{value:.3g}".replace("e+0", "e").replace("e+", "e").replace("e-0", "e-")
    if text.startswith(("0.", "-0.")):
        text = text.replace("0.", ".", 1)
    return text


def clock(seconds: float) -> str:
    minutes, seconds = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes}:{seconds:02d}"


# What the progress line shows: (metric, label, group, meaning), in display order. The group
# "eval" holds the last periodic evaluation's values, kept until the next one.
PROGRESS_FIELDS = (
    ("train/epsilon", "eps", "train", "random-action share"),
    ("train/episode_return", "ret", "train", "recent training return"),
    ("train/risk_outcome", "R_s", "train", "its risk outcome"),
    ("eval/utility", "U", "eval", "utility"),
    ("eval/expectation", "E", "eval", "mean return"),
    ("eval/risk_outcome", "R_s", "eval", "risk outcome"),
    ("eval/w1_greedy", "W1", "eval", "error of the learnt return law"),
)
# Which fields a narrow line keeps first (the rest, last first, make way): the steps and
# rate, then R_s and U, the quantities a risk-sensitive run is about.
_KEPT_FIRST = ("steps", "rate", "eval/risk_outcome", "train/risk_outcome", "eval/utility",
               "train/episode_return", "eval/expectation", "eval/w1_greedy", "time",
               "train/epsilon")


def progress_line(step: int, total: int, rate: float | None, elapsed: float,
                  metrics: dict[str, float], width: int | None) -> str:
    """One line of training progress: ``step/total``, updates per second (once), elapsed and
    remaining time, the training values and, after ``| eval``, the last evaluation's. With a
    ``width``, fields are left out (the least wanted first, :data:`_KEPT_FIRST`) until it fits:
    a value is never cut."""
    fields: dict[str, str] = {"steps": f"{step}/{total}"}
    if rate is not None and rate > 0:
        fields["rate"] = f"{compact_number(rate)}/s"
        fields["time"] = f"{clock(elapsed)}<{clock((total - step) / rate)}"
    groups = {name: group for name, _, group, _ in PROGRESS_FIELDS}
    for name, label, _, _ in PROGRESS_FIELDS:
        if name in metrics:
            fields[name] = f"{label} {compact_number(metrics[name])}"

    def render(kept: set[str]) -> str:
        parts, in_eval = [], False
        for name, text in fields.items():
            if name not in kept:
                continue
            if groups.get(name) == "eval" and not in_eval:
                parts.append("| eval")
                in_eval = True
            parts.append(text)
        return " ".join(parts)

    kept = set(fields)
    line = render(kept)
    for name in reversed(_KEPT_FIRST):
        if width is None or len(line) <= width:
            break
        kept.discard(name)
        line = render(kept)
    return line if width is None else line[:width]


def progress_legend(shows_epsilon: bool) -> str:
    """What each figure of the progress line means, in one line shown once at the start
    (epsilon only for an agent that explores by it)."""
    parts = {"train": [], "eval": []}
    for name, label, group, meaning in PROGRESS_FIELDS:
        if name != "train/epsilon" or shows_epsilon:
            parts[group].append(f"{label} {meaning}")
    return ("progress: updates/total, updates/s, time spent<left, "
            + ", ".join(parts["train"]) + " | eval (the last, greedy policy): "
            + ", ".join(parts["eval"]))


def terminal_width(stream) -> int | None:
    """The width to draw a progress bar in: ``COLUMNS`` or the terminal's, for a stream that
    is a terminal; None otherwise (a log file, a pipe, a job scheduler's output)."""
    try:
        if not stream.isatty():
            return None
    except (AttributeError, ValueError):
        return None
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    try:
        return os.get_terminal_size(stream.fileno()).columns or None
    except (OSError, AttributeError, ValueError):
        return None

class RewardOutsideSupport(pl.Callback):
    """Warn once per run when a learnt reward (scaled and clipped) lies far outside the
    declared return support [return_min, return_max], more than its width beyond either end:
    the return distributions cannot represent such returns, and the support or
    ``env.reward_scale`` is probably wrong. The buffer's rewards are checked every
    ``period`` updates (a min and a max, nothing per step)."""

    def __init__(self, return_min: float, return_max: float, period: int = 500) -> None:
        width = return_max - return_min
        self.support = (return_min, return_max)
        self.low, self.high = return_min - width, return_max + width
        self.period = period
        self.warned = False

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.warned or trainer.global_step % self.period not in (0, 1):
            return
        collector = getattr(trainer.datamodule, "collector", None)
        if collector is None:
            return
        rewards = collector.buffer.rewards()
        if not rewards.numel():
            return
        low, high = float(rewards.min()), float(rewards.max())
        if low >= self.low and high <= self.high:
            return
        self.warned = True
        far = low if low < self.low else high
        print(f"warning: a learnt reward of {far:g} lies far outside the return support "
              f"[{self.support[0]:g}, {self.support[1]:g}] (env.return_min, env.return_max): "
              "widen the support or scale the rewards (env.reward_scale)", file=sys.stderr)


class TrainingProgress(pl.Callback):
    """Training progress over gradient updates: updates per second, time, epsilon (an
    epsilon-greedy agent's), the recent training return and R_s, and the last evaluation's U,
    E (mean return), R_s and W1 (kept until the next evaluation); what each means in a legend
    line at the start (:func:`progress_legend`).

    On a terminal of known width, one line redrawn in place every ``refresh_seconds``, fitted
    to the width (:func:`progress_line`). Anywhere else (not a terminal, no size: logs,
    pipes, batch jobs) a plain line every ``max(refresh_seconds, PLAIN_LINE_SECONDS)`` and
    after each evaluation, so that a log shows how the run goes.
    """

    PLAIN_LINE_SECONDS = 10.0

    def __init__(self, refresh_seconds: float = 1.0, stream=None, width: int | None = None
                 ) -> None:
        self.refresh_seconds = refresh_seconds
        self.stream = stream if stream is not None else sys.stderr
        # width given: draw in place at that width (the tests); else the stream's own.
        self.width = width if width is not None else terminal_width(self.stream)
        self._start: tuple[float, int] = (0.0, 0)
        self._last_shown = 0.0
        self._last_eval: float | None = None
        self._drawn = False
        self._shown_step = -1

    @property
    def in_place(self) -> bool:
        return self.width is not None

    def on_train_start(self, trainer, pl_module) -> None:
        exploration = getattr(pl_module, "exploration", None)
        self.stream.write("[rs_lightning] " + progress_legend(
            getattr(exploration, "explores_by_epsilon", True)) + "\n")
        self.stream.flush()
        self._start = (time.perf_counter(), trainer.global_step)
        self._last_shown = self._start[0]

    def _line(self, trainer, pl_module, width: int | None) -> str:
        now = time.perf_counter()
        start_time, start_step = self._start
        step = trainer.global_step
        elapsed = now - start_time
        rate = (step - start_step) / elapsed if step > start_step and elapsed > 0 else None
        return progress_line(step, trainer.max_steps, rate, elapsed, pl_module.live_metrics,
                             width)

    def _show(self, trainer, pl_module) -> None:
        if self.in_place:
            # One column fewer than the width: a full line would wrap on some terminals.
            line = self._line(trainer, pl_module, self.width - 1)
            self.stream.write("\r" + line.ljust(self.width - 1))
            self._drawn = True
        else:
            self.stream.write("[rs_lightning] " + self._line(trainer, pl_module, None) + "\n")
        self.stream.flush()
        self._last_shown = time.perf_counter()
        self._shown_step = trainer.global_step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step % pl_module.log_every_n_steps:
            return
        evaluated = pl_module.live_metrics.get("eval/utility")
        new_evaluation = evaluated is not None and evaluated is not self._last_eval
        period = self.refresh_seconds if self.in_place else max(self.refresh_seconds,
                                                                self.PLAIN_LINE_SECONDS)
        if new_evaluation or time.perf_counter() - self._last_shown >= period:
            self._last_eval = evaluated
            self._show(trainer, pl_module)

    def on_train_end(self, trainer, pl_module) -> None:
        if trainer.global_step != self._shown_step:
            self._show(trainer, pl_module)
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()
