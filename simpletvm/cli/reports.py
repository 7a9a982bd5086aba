"""The lines the commands print about a tuning and a build: the verdict on tuning, the
estimate, the skipped tasks, a build's answers, and the tuning's progress display."""

from __future__ import annotations

from pathlib import Path

from simpletvm.console import clock_text, ms_text


def tuning_verdict(untuned_ms: float, tuned_ms: float) -> str:
    """What tuning did to a latency, as a factor of at least 1 and its direction: "tuning
    made it 1.26x faster than untuned", "... 1.26x slower ...", or "as fast as" when the
    factor rounds to 1.00. Give it the latencies as printed, so that a reader who checks
    the verdict against them finds it right."""
    factor = max(untuned_ms, tuned_ms) / min(untuned_ms, tuned_ms)
    if f"{factor:.2f}" == "1.00":
        return "tuning made it as fast as untuned"
    direction = "faster" if tuned_ms < untuned_ms else "slower"
    return f"tuning made it {factor:.2f}x {direction} than untuned"


def estimate_text(summary: dict) -> str:
    """The tuning estimate: timed inside the model when autotune did, else from its
    kernels timed alone (and the search's own when the closing round changed it)."""
    kernels = ms_text(summary["estimated_latency_s"])
    if summary.get("in_model_latency_s"):
        return (
            f"estimate {ms_text(summary['in_model_latency_s'])} ms, timed inside the model "
            f"(its kernels timed alone: {kernels} ms)"
        )
    text = f"estimate {kernels} ms"
    if summary["remeasured"]:
        text += (
            f" (the search's {ms_text(summary['search_estimated_latency_s'])} ms before "
            f"its best {summary['remeasured']} records were timed again)"
        )
    return text


def tuning_time(summary: dict) -> str:
    """autotune()'s whole wall time, the round inside the model included."""
    return clock_text(sum(summary["spent_s"].values()))


def print_skipped(console, summary: dict) -> None:
    from rich.text import Text

    for skipped in summary.get("skipped_tasks", []):
        console.print(
            Text.assemble(
                ("skipped", "yellow"),
                f" {skipped['task']} (built with its default schedule): {skipped['error']}",
            ),
            highlight=False,
        )


def answer_text(answers: dict) -> str:
    """A build's error against its source framework, as printed beside its latency."""
    if answers.get("max_rel_error") is None:
        return "answers not checked"
    return f"rel. error {answers['max_rel_error']:.1e} vs {answers['reference']}"


def print_unchecked(console, answers: dict) -> None:
    """Why a build's answers were not compared with its source framework's, if they were
    not."""
    if answers.get("max_rel_error") is None:
        why = answers["reference"].removeprefix("none: ")
        console.print(f"(answers not checked: {why})", highlight=False, soft_wrap=True)


def tuning_progress(console, model: str, minutes: float | None):
    """The tuning job's progress on ``console`` (:mod:`simpletvm.progress`, as
    ``autotune(progress=True)`` shows it): a live line on a terminal, plain whole lines
    now and then in a pipe or a log."""
    from simpletvm.progress import TuningProgress

    return TuningProgress(Path(model).name or model, minutes, console=console)
