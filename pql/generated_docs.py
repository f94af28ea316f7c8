"""Sections of the docs that code generates (docs/configuration.md's reference, docs/gpu.md's
targets), each kept between a start and an end marker and rewritten in place."""

from __future__ import annotations


def rewrite_section(path: str, start: str, end: str, body: str) -> None:
    """Replace what stands between the one `start` and the one `end` marker in `path` with body."""
    with open(path, encoding="utf-8") as file:
        text = file.read()
    if text.count(start) != 1 or text.count(end) != 1:
        raise SystemExit(f"{path}: expected one {start} and one {end}")
    head, rest = text.split(start)
    tail = rest.split(end)[1]
    with open(path, "w", encoding="utf-8") as file:
        file.write(f"{head}{start}\n\n{body}\n\n{end}{tail}")
