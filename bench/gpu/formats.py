"""Numbers and Markdown tables as the report and docs/gpu.md show them."""

from __future__ import annotations


def fmt_rate(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.1f}"


def fmt_duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{int(seconds // 60)} min {seconds % 60:.0f} s"


def fmt_measure(value: float, unit: str) -> str:
    """A target's value or a measure in a target's unit."""
    if unit == "fraction":
        return f"{value:.0%}" if value >= 0.1 else f"{value:.1%}"
    if unit == "us":
        return f"{value:,.0f} µs"
    if unit == "x":
        return f"{value:.0f}×"
    if unit == "s":
        return f"{value:.1f} s"
    return fmt_rate(value)


def table(header: list[str], rows: list[list[str]], align: str) -> list[str]:
    """Markdown table lines; align has one 'l' or 'r' per column."""
    rule = "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"
    return ["| " + " | ".join(header) + " |", rule] + ["| " + " | ".join(r) + " |" for r in rows]
