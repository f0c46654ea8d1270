"""The hub's settings: what `make hub` was given, kept in HUB_STATE/settings.json so
that the hub's configuration, the grader page and `hub/classroom.py` agree."""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_STATE = Path("/srv/course-hub")


class NoHub(LookupError):
    """No `make hub` has saved its settings in the folder asked for."""


@dataclass
class Settings:
    state: Path = DEFAULT_STATE          # hub database, cookie secret, students' runtime, grading output
    exchange: Path = Path("/srv/nbgrader/exchange")  # nbgrader's exchange (its documented default)
    homes: Path = Path("/home")          # where the accounts' home folders are made
    users: Path = REPO / "hub" / "users.txt"
    course_id: str = "picotorch"
    ip: str = "127.0.0.1"
    port: int = 8888
    repo: Path = REPO
    roles: dict = field(default_factory=dict)  # name -> instructor|student, from the user list
    runtime_dir: Path | None = None  # the students' runtime; default HUB_STATE/runtime

    @property
    def instructor(self) -> str:
        return next(n for n, r in self.roles.items() if r == "instructor")

    @property
    def students(self) -> list[str]:
        return sorted(n for n, r in self.roles.items() if r == "student")

    @property
    def runtime(self) -> Path:
        return self.runtime_dir or self.state / "runtime"

    def course_dir(self, home: Path) -> Path:
        return home / "course"

    def save(self) -> None:
        data = {k: str(v) if isinstance(v, Path) else v for k, v in asdict(self).items()}
        path = self.state / "settings.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)


def load(state: Path | str | None = None) -> Settings:
    """The settings `make hub` saved in `state` (default: $HUB_STATE or /srv/course-hub)."""
    state = Path(state or os.environ.get("HUB_STATE") or DEFAULT_STATE)
    path = state / "settings.json"
    if not path.is_file():
        raise NoHub(f"no course hub in {state}: start one with `make hub` (HUB_STATE={state}) first.")
    data = json.loads(path.read_text())
    paths = {"state", "exchange", "homes", "users", "repo", "runtime_dir"}
    return Settings(**{k: Path(v) if k in paths and v is not None else v for k, v in data.items()})
