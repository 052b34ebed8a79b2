"""Every error the engine raises on purpose, in one place; transports map each to one HTTP
status (``http_status``)."""

from __future__ import annotations


class JuneError(Exception):
    http_status = 500
    code = "error"


class FatalToolError(JuneError):
    """Raised by a tool for a mistake the model cannot fix: the turn fails."""

    code = "fatal_tool_error"


class ToolDeclarationError(FatalToolError):
    """A tool is declared wrongly (e.g. a plain ``def run`` that returned an awaitable)."""

    code = "tool_declaration_error"


class AgentConfigError(JuneError):
    """An agent folder or definition is invalid (named file missing, bad policy, …)."""

    code = "agent_config_error"


class ChildSessionRefused(JuneError):
    """A spawn's child session exists and is not the parent owner's (a store refuses to run a
    child in it): the spawning tool call's error result, never another user's session."""

    http_status = 409
    code = "child_session_refused"


class NotFound(JuneError):
    http_status = 404
    code = "not_found"


class TurnConflictError(JuneError):
    """The request does not fit the turn's or session's state (409)."""

    http_status = 409
    code = "conflict"


class SessionSuspendedError(TurnConflictError):
    """One park per session: while it is suspended, other turns are refused."""

    code = "session_suspended"


class SessionTakenOverError(TurnConflictError):
    """A person has taken the session over: no turn starts until they hand it back (the user's
    messages go to them instead)."""

    code = "taken_over"


class SessionBusyError(TurnConflictError):
    """A branch is made or switched only while the session is idle (no queued, running or
    parked turn)."""

    code = "session_busy"


class ResumeAuthorizationError(JuneError):
    """The resumer may not answer this request (403)."""

    http_status = 403
    code = "forbidden"


class InvalidAnswerError(JuneError):
    """The answer does not match the request's JSON schema (422); nothing is applied."""

    http_status = 422
    code = "invalid_answer"


class AuthorizeAnswerError(JuneError):
    """The agent's ``authorize_answer`` raised (500); nothing is applied, retry is safe."""

    http_status = 500
    code = "authorize_answer_failed"


class StaleAttemptError(JuneError):
    """This attempt no longer owns the turn's lease; its transaction was rolled back."""

    code = "stale_attempt"


class TurnNotResumable(TurnConflictError):
    code = "not_suspended"


class UnattestedSpeakerError(FatalToolError):
    """``request_input`` with no ``answerers`` on a turn whose speaker is not attested."""

    code = "unattested_speaker"
