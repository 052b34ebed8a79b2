"""The June engine: pure Python and asyncio, no Django (an import contract test enforces it)."""

from .agent import Agent, SurfacePolicy, surface
from .answers import Grant, check_answer_schema, check_answerer, grant_answer
from .control import RetryableTurnError, Signals
from .errors import (
    AgentConfigError,
    AuthorizeAnswerError,
    FatalToolError,
    InvalidAnswerError,
    JuneError,
    NotFound,
    ResumeAuthorizationError,
    SessionSuspendedError,
    StaleAttemptError,
    ToolDeclarationError,
    TurnConflictError,
    TurnNotResumable,
    UnattestedSpeakerError,
)
from .events import EVENT_TYPES, TERMINAL_TYPES, TurnEvent, event_from_json
from .executor import TurnExecutor
from .fakes import RecordingSink, ScriptedModel, reply
from .loop import TurnLoop
from .memory import InMemorySessionStore
from .messages import Message, Role, ToolCall, input_step_id, model_step_id, tool_step_id
from .model import ModelError, ModelReply, ModelRequest, ReasoningDelta, StopReason, TextDelta, ToolSpec
from .position import Next, NextKind, next_action
from .recovery import RecoveryState, classify_submission_state
from .seams import (
    Commit,
    EventSink,
    LoggedEvent,
    Model,
    Phase,
    SessionRef,
    SessionStatus,
    SessionStore,
    TurnInput,
    TurnRecord,
    TurnState,
    TurnStatus,
)
from .session import (
    AgentSession,
    LocalBus,
    LocalDispatcher,
    Runtime,
    TurnParkedError,
    TurnResult,
    new_turn_id,
    short_turn_id,
)
from .tools import (
    CANCELLED_RESULT,
    INTERRUPTED_TOOL_RESULT,
    ActionContext,
    Tool,
    ToolContext,
    define_action,
    require_handle,
    tool,
)

__all__ = [name for name in dir() if not name.startswith("_")]
