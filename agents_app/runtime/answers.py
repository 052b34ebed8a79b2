"""Who may answer a parked request, as pure rules (human in the loop).

- ``{"user": id}``: exactly that verified identity (``by``); a grant never answers a user.
- ``{"policy": name, "scope": …}``: only a grant for exactly that policy and scope, made by the
  agent's ``authorize_answer`` at resume time; ``by`` alone never answers a policy.
- ``None``: unrestricted (a turn with no inbound speaker).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

import jsonschema

from .errors import AuthorizeAnswerError, InvalidAnswerError, ResumeAuthorizationError, UnattestedSpeakerError
from .seams import TurnRecord


@dataclass(frozen=True, slots=True)
class Grant:
    policy: str
    scope: Any = None


def check_answer_schema(request: dict[str, Any], answer: Any) -> None:
    schema = request.get("schema")
    if not schema:
        return
    try:
        jsonschema.validate(answer, schema)
    except jsonschema.ValidationError as exc:
        raise InvalidAnswerError(f"answer does not match the request's schema: {exc.message}") from None


def check_answerer(request: dict[str, Any], *, by: str | None, granted: Grant | None) -> None:
    answerers = request.get("answerers")
    if not answerers:
        return
    if "user" in answerers:
        if by is None or str(by) != str(answerers["user"]):
            raise ResumeAuthorizationError("only the user this request names may answer it")
        return
    if "policy" in answerers:
        want = Grant(answerers["policy"], answerers.get("scope"))
        if granted is None or granted != want:
            raise ResumeAuthorizationError(f"answering needs a grant for policy {want.policy!r}")
        return
    raise ResumeAuthorizationError("unknown answerers rule")


def _policy_of(pending: dict[str, Any]) -> dict[str, Any] | None:
    answerers = (pending.get("request") or {}).get("answerers") or {}
    return answerers if "policy" in answerers else None


def _ask(authorize_answer: Any, answerers: dict[str, Any], resume: dict[str, Any]) -> Any:
    try:
        return authorize_answer(
            policy=answerers["policy"],
            scope=answerers.get("scope"),
            by=resume.get("by"),
            principal=resume.get("principal"),
        )
    except Exception as exc:
        raise AuthorizeAnswerError(f"authorize_answer failed: {type(exc).__name__}: {exc}") from exc


async def grant_answer(
    pending: dict[str, Any],
    resume: dict[str, Any],
    authorize_answer: Any,
    call: Callable[[Callable[[], Any]], Awaitable[Any]] | None = None,
) -> Grant | None:
    """Ask the agent's ``authorize_answer(policy, scope, by, principal)`` for a grant.

    Returns the grant, or None when the request has no policy answerer or the hook says no.
    A hook that raises is an AuthorizeAnswerError (500): nothing is applied, retry is safe.
    ``call`` runs a synchronous hook where the host wants it (e.g. where it may read the
    host's database); an async hook is awaited here.
    """
    answerers = _policy_of(pending)
    if answerers is None or authorize_answer is None:
        return None
    ask = lambda: _ask(authorize_answer, answerers, resume)  # noqa: E731
    ok = await call(ask) if call is not None else ask()
    if inspect.isawaitable(ok):
        try:
            ok = await ok
        except Exception as exc:
            raise AuthorizeAnswerError(f"authorize_answer failed: {type(exc).__name__}: {exc}") from exc
    return Grant(answerers["policy"], answerers.get("scope")) if ok is True else None


def default_answerers(turn: TurnRecord) -> dict[str, Any] | None:
    """The turn's speaker when the channel attests it; unrestricted with no inbound speaker."""
    user = turn.input.user
    # a child turn (subagents) acts for its parent's speaker
    if turn.input.kind not in ("inbound", "child") or not user:
        return None
    if not user.get("attested"):
        raise UnattestedSpeakerError(
            "request_input: the speaker of this turn is not attested by its channel, so nobody "
            "can be trusted to answer by default; pass answerers={'user': …} or {'policy': …}"
        )
    return {"user": str(user["id"])}
