"""Twisted's HTTP factory formatted a combined-log line for every request and gave it to
Twisted's log, which daphne sends nowhere at its default verbosity (and at a higher one to the
logger ``daphne.server`` at INFO): ``june_project.asgi`` has the line formatted only when that
logger keeps it."""

from __future__ import annotations

import logging

import pytest


@pytest.fixture
def factory():
    from daphne.http_protocol import HTTPFactory

    import june_project.asgi  # noqa: F401 (its daphne hooks)

    made = HTTPFactory(server=None)
    lines: list[str] = []
    formatted: list[object] = []

    class File:
        def write(self, line: str) -> None:
            lines.append(line)

    made._logFile = File()
    made._logFormatter = lambda when, request: formatted.append(request) or "a line"
    return made, lines, formatted


def test_no_line_is_formatted_for_a_logger_that_would_drop_it(factory):
    made, lines, formatted = factory
    logger = logging.getLogger("daphne.server")
    level = logger.level
    try:
        logger.setLevel(logging.WARNING)
        made.log(object())
        assert formatted == [] and lines == []
        logger.setLevel(logging.INFO)
        made.log(request := object())
        assert formatted == [request] and lines == ["a line\n"]
    finally:
        logger.setLevel(level)
