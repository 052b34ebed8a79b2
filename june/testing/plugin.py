"""The pytest plugin of ``june.testing`` (entry point ``pytest11``: ``june``).

pytest imports its plugins before pytest-django configures Django, so this module imports
nothing of June's apps at its top: the fixture imports the tester when a test asks for it.
"""

from __future__ import annotations

from typing import Any

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--june-record",
        action="store_true",
        default=False,
        help="june.testing: record cassettes from the agents' real models (else they are replayed)",
    )


@pytest.fixture
def june(request: pytest.FixtureRequest) -> Any:
    """A ``JuneTester`` on the test database (pytest-django's ``db``, or ``transactional_db``
    when the test is marked so): ``june.run(agent, text, model=script)``; ``june.cassette()``
    is ``cassettes/<module>/<test>.json`` beside the test's file."""
    try:
        request.getfixturevalue("db")
    except pytest.FixtureLookupError:
        pytest.fail(
            "the june fixture runs turns on pytest-django's test database: install pytest-django and "
            "name the project's settings (DJANGO_SETTINGS_MODULE in pytest.ini: docs/testing.md)",
            pytrace=False,
        )
    from june.testing.tester import JuneTester  # Django's apps are ready only now (module docstring)

    path = request.node.path
    name = request.node.name.replace("/", "_").replace("[", "-").rstrip("]")
    return JuneTester(
        cassettes=path.parent / "cassettes" / path.stem,
        record=bool(request.config.getoption("june_record")),
        name=name,
    )
