"""The gateway's error hierarchy. HTTP status and error code live on the class, mapped once."""

from __future__ import annotations


class GatewayError(Exception):
    """Base of every error the gateway raises on purpose."""

    status = 500
    code = "internal_error"
    param: str | None = None  # the request field at fault, when one is (OpenAI's ``param``)

    def __init__(self, message: str, *, code: str | None = None,
                 param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.param = param


class ConfigError(GatewayError):
    """A configuration value is missing or invalid; start-up stops."""

    code = "config_error"


class BadRequest(GatewayError):
    """The client sent input the gateway will not accept."""

    status = 400
    code = "bad_request"


class Unauthorized(GatewayError):
    """No API token, or one that matches no account."""

    status = 401
    code = "unauthorized"


class Forbidden(GatewayError):
    """A webhook secret or signature did not match."""

    status = 403
    code = "forbidden"


class AccountBlocked(Forbidden):
    """An admin blocked the account: its API calls and channel turns are refused (its data
    stays)."""

    code = "account_blocked"

    def __init__(self, message: str = "this account is blocked; ask the gateway's operator") \
            -> None:
        super().__init__(message)


class AdminOnly(Forbidden):
    """The route is for admin accounts (``cloudybot users promote``)."""

    code = "admin_only"

    def __init__(self, message: str = "only an admin account may call this") -> None:
        super().__init__(message)


class PaymentRequired(GatewayError):
    """The user has no AI credits left."""

    status = 402
    code = "out_of_credits"


class NotFound(GatewayError):
    """The thing does not exist, or belongs to someone else."""

    status = 404
    code = "not_found"


class Conflict(GatewayError):
    """The request collides with what is already stored (a message answered twice)."""

    status = 409
    code = "conflict"


class TurnStopped(Conflict):
    """The turn was stopped (``POST /api/threads/{id}/stop``) before the model wrote anything:
    nothing was stored or charged."""

    code = "turn_stopped"


class PayloadTooLarge(GatewayError):
    """A request body, or a prompt that cannot be trimmed, is too large."""

    status = 413
    code = "too_large"


class UnsupportedMediaType(GatewayError):
    """The request body is not of the media type the route reads."""

    status = 415
    code = "unsupported_media_type"


class RateLimited(GatewayError):
    """The user sent more requests than their plan allows."""

    status = 429
    code = "rate_limited"

    def __init__(self, message: str, *, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class Unavailable(GatewayError):
    """The gateway is starting or stopping; try again later."""

    status = 503
    code = "unavailable"


class ProviderError(GatewayError):
    """The LLM provider failed or answered with an error."""

    status = 502
    code = "provider_error"


class EmptyReply(ProviderError):
    """The model answered with no text and no tool calls: nothing to show, nothing charged."""

    code = "empty_reply"


class ProviderUnavailable(ProviderError):
    """The LLM provider cannot answer now (429, 5xx, 529, no connection, a timeout): another
    provider may. ``reason`` says why, for metrics: the HTTP status, ``connection`` or
    ``timeout``."""

    def __init__(self, message: str, *, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class ProviderTimeout(ProviderUnavailable):
    """The LLM provider did not answer in time."""

    status = 504
    code = "provider_timeout"

    def __init__(self, message: str) -> None:
        super().__init__(message, reason="timeout")


class PluginError(GatewayError):
    """A plugin is missing, broken or misconfigured."""

    code = "plugin_error"


def one_line(error: BaseException) -> str:
    """An error as one line: its type and the first line of its message."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
