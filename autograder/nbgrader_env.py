"""Run nbgrader's Python API on a throwaway course folder."""
from __future__ import annotations

import contextlib
import logging
import os
import sys
from pathlib import Path


def ensure_venv_on_path() -> None:
    """nbgrader's gradebook runs `alembic` as a command: this venv's bin/ must be on PATH."""
    bindir = str(Path(sys.executable).parent)
    if bindir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")


def api(root: Path, db_url: str | None = None, **config):
    """An NbGraderAPI over course folder `root`; `config` sets extra traits as {"Class.trait": value}."""
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config import Config

    ensure_venv_on_path()
    cfg = Config()
    cfg.CourseDirectory.root = str(root)
    cfg.CourseDirectory.db_url = db_url or f"sqlite:///{root / 'gradebook.db'}"
    cfg.Exchange.root = str(root / "exchange")
    (root / "exchange").mkdir(parents=True, exist_ok=True)  # nbgrader complains loudly when it is missing
    for key, value in config.items():
        cls, trait = key.split(".")
        cfg[cls][trait] = value
    logging.getLogger("traitlets").setLevel(logging.ERROR)
    return NbGraderAPI(CourseDirectory(config=cfg), config=cfg)


@contextlib.contextmanager
def quiet():
    """nbgrader logs every step at INFO; the build and grader report in their own words."""
    with open(os.devnull, "w") as null, contextlib.redirect_stdout(null), contextlib.redirect_stderr(null):
        yield


def check(result: dict, what: str) -> None:
    if not result.get("success"):
        raise RuntimeError(f"nbgrader {what} failed:\n{result.get('error') or result.get('log')}")
