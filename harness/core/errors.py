"""Errors a user can cause in the harness and CI: a bad option, a bad file, a role's
packages not installed.

The engine has its own (``mini_engine.errors``, rooted at ``KVBenchError``) and the
harness does not borrow them: every harness and CI error derives from ``HarnessError``,
so the bot and triage need no engine to say what is wrong. The CLI prints
``str(err)`` and exits 2 for either kind, without a traceback.
"""

from __future__ import annotations


class HarnessError(Exception):
    """Base of every error a user can cause in the harness or CI code."""


class UsageError(HarnessError, ValueError):
    """An option or a configuration file (runners, permissions, workflows) is not valid.

    Named apart from the engine's ``mini_engine.errors.ConfigError`` (a bad engine
    option): a handler that sees either name knows which layer refused the input."""


class MissingExtra(HarnessError):
    """A command needs packages of a role (an extra) that is not installed."""

