"""User-facing errors. Each carries its exit code and a one-line message; no traceback
ever reaches the user (see `pipelines.cli.main`)."""


class LlmopsError(Exception):
    """An error whose message is meant for the user, as one line."""

    exit_code = 2

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))


class InputError(LlmopsError):
    """Unusable input or configuration: missing, unreadable, binary, empty, invalid."""

    exit_code = 2


class GateFailed(LlmopsError):
    """A stage ran to completion but its quality gate said no (outputs are written)."""

    exit_code = 1
