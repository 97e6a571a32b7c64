"""One exception type for every user-facing failure: the CLI prints its message as one line and exits non-zero."""


class MixCSEError(Exception):
    """A problem with the user's input (config, data, model path) rather than a bug in mixcse."""


class ConfigError(MixCSEError):
    pass


class DataError(MixCSEError):
    pass
