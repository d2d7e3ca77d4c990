"""Read a JSON or TOML file the CI layer is configured by (or handed, like an event).

One place turns a missing, unreadable or malformed file into a one-line error naming
the file, so the permissions, the runner registry and the bot's event agree.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

from harness.core.errors import UsageError, HarnessError
from mini_engine.files import read_regular


def read_config(path: str | Path, what: str, *, error: type[HarnessError] = UsageError) -> Any:
    """The parsed content of `path` (TOML if it ends in .toml, JSON otherwise); `what`
    names it in the message, e.g. 'runner registry' or '--event'."""
    path = Path(path)
    toml = path.suffix == ".toml"
    try:
        text = read_regular(path, what, error).decode("utf-8")
        return tomllib.loads(text) if toml else json.loads(text)
    except error:  # not a regular file: already one line
        raise
    except FileNotFoundError:
        raise error(f"{what} {path} does not exist") from None
    except json.JSONDecodeError as err:
        raise error(f"{what} {path} is not valid JSON: {err.msg} (line {err.lineno})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise error(f"{what} {path} is not valid {'TOML' if toml else 'JSON'}: {str(err)[:200]}") from None
    except RecursionError:
        raise error(f"{what} {path} is nested too deeply to read") from None
    except ValueError as err:  # e.g. an integer of more digits than Python converts
        raise error(f"{what} {path} is not valid {'TOML' if toml else 'JSON'}: {str(err)[:120]}") from None
    except OSError as err:
        raise error(f"{what} {path} cannot be read ({type(err).__name__})") from None
