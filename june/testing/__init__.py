"""``june.testing``: test an agent from a project's own pytest suite (docs/testing.md).

The pytest plugin (``june.testing.plugin``, registered through the ``pytest11`` entry point:
installing June is enough, with pytest-django) gives a test the ``june`` fixture, a
``JuneTester``: ``june.run("clerk", "order 2 mugs", model=[reply(...), ...])`` runs the agent's
turn on the test database's Django store and returns a ``TurnRun`` to assert on.

pytest imports this package (for its plugin) before pytest-django has configured Django, so its
public names are resolved when first used (PEP 562), not at its import.
"""

from __future__ import annotations

import importlib
from typing import Any

#: public name -> the module that defines it
_NAMES = {
    "Cassette": "june.testing.cassettes",
    "CassetteMismatch": "june.testing.cassettes",
    "Crash": "june.testing.crashing",
    "JuneTester": "june.testing.tester",
    "ToolCallRun": "june.testing.turnrun",
    "TurnRun": "june.testing.turnrun",
    "ModelReply": "agents_app.runtime",
    "ModelRequest": "agents_app.runtime",
    "ScriptedModel": "agents_app.runtime",
    "reply": "agents_app.runtime",
    # what a refused answer raises (the site's 403 and 422)
    "ResumeAuthorizationError": "agents_app.runtime.errors",
    "InvalidAnswerError": "agents_app.runtime.errors",
    # what a cancel of a turn parked on an answer raises (the site's 409)
    "TurnConflictError": "agents_app.runtime.errors",
}

__all__ = sorted(_NAMES)


def __getattr__(name: str) -> Any:
    if name not in _NAMES:
        raise AttributeError(f"module 'june.testing' has no attribute {name!r}")
    return getattr(importlib.import_module(_NAMES[name]), name)
