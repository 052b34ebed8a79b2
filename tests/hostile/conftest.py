"""The closing count of hostile cases per endpoint (and 5xx seen: must be 0).

The Hypothesis profiles live in ``support.py`` (``hostile``: tens of examples per property, so
the folder runs in about a minute on two cores; ``JUNE_HOSTILE_PROFILE=hostile-long`` for a
soak with ten times as many). Deadlines are off: a request's time is the machine's."""

from __future__ import annotations

import pytest

from .support import ACCEPTED, CASES, SERVER_ERRORS, STATUSES


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not CASES:
        return
    terminalreporter.section("hostile cases per endpoint")
    for endpoint in sorted(CASES):
        statuses = " ".join(f"{status}:{n}" for (name, status), n in sorted(STATUSES.items()) if name == endpoint)
        terminalreporter.write_line(
            f"{endpoint:<40} {CASES[endpoint]:>5} cases {ACCEPTED[endpoint]:>4} accepted "
            f"{SERVER_ERRORS[endpoint]} 5xx  ({statuses})"
        )
    terminalreporter.write_line(
        f"{'total':<40} {sum(CASES.values()):>5} cases {sum(ACCEPTED.values()):>4} accepted "
        f"{sum(SERVER_ERRORS.values())} 5xx"
    )


@pytest.fixture(autouse=True)
def _fast_passwords(settings):
    """Users are made per test: a fast hasher (these tests are about requests, not passwords)."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _no_rate_limits(settings):
    """Hypothesis sends hundreds of turns a minute for one user: these tests are about what the
    API answers to hostile input, not about its rate limits (tests/integration/test_quotas.py)."""
    settings.JUNE_RATE_LIMITS = False
