"""Reading back the JSON files fpt wrote (a run's config and summary, an export's settings).

`read_json_object(path, ...)` is the one reader: a missing or damaged file is one line naming the
fix. It lives here, not beside `paths.write_json`, so that `paths` raises nothing and stays at the
bottom of the package with `errors`.
"""

from __future__ import annotations

import json
from pathlib import Path

from fpt.core.errors import FptError


def read_json_object(
    path: str | Path, made_by: str | None = None, *, missing: str | None = None, damaged: str | None = None
) -> dict:
    """The JSON object in `path`; a missing or damaged file is one line naming the fix: to write it
    (again) with `made_by`, the command that writes it, or else the `missing` and `damaged` texts."""
    path = Path(path)
    missing = missing or f"write it with `{made_by}`"
    damaged = damaged or f"write it again with `{made_by}`"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise FptError(f"{path} is missing; {missing}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise FptError(f"{path} is not valid JSON ({exc}); {damaged}") from None
    if not isinstance(data, dict):
        raise FptError(f"{path} holds a {type(data).__name__}, not a JSON object; {damaged}")
    return data
