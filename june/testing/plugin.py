"""The pytest plugin of ``june.testing`` (entry point ``pytest11``: ``june``).

pytest imports its plugins before pytest-django configures Django, so this module imports
nothing of June's apps at its top: the fixture imports the tester when a test asks for it.
"""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture
def june(request: pytest.FixtureRequest) -> Any:
    """A ``JuneTester`` on the test database (pytest-django's ``db``, or ``transactional_db``
    when the test is marked so): ``june.run(agent, text, model=script)``."""
    request.getfixturevalue("db")
    from june.testing.tester import JuneTester  # Django's apps are ready only now (module docstring)

    return JuneTester()
