"""The one base class of every error a user's input can cause (a bad config value, a missing
checkpoint, a corrupt file, an unknown plugin). The CLI prints it as one line and exits 2, the UI
shows it as one message; any other exception is a bug and keeps its traceback for the log."""


class LabError(ValueError):
    """Bad input, said in one line: what was wrong, which value, what is right."""


class ConfigError(LabError):
    """A config value a person can fix: the message says which key, what it was, what is right."""


class Aborted(Exception):
    """A long computation gave up because its caller asked it to (a training job told to stop)."""
