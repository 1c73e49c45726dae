"""Errors of the local stack, each naming what went wrong and what to do about it."""


class StackError(RuntimeError):
    """A component of the local stack could not be installed, started or stopped."""


class ToolMissingError(StackError):
    """A program esp needs (java, mvn) is not on PATH."""


class PortTakenError(StackError):
    """A port esp wants to listen on is already in use by another process."""


class BrokerNotAnsweringError(StackError):
    """The broker process runs (or should) but does not answer metadata requests."""
