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


def stamp_in_process() -> None:
    """nbgrader stamps each new gradebook with the head of its alembic migrations, which it finds by
    running the `alembic heads` command: a fresh interpreter importing alembic and nbgrader's
    migrations, about 3 s for every gradebook made (each grader's throwaway one, the class's). The
    same head, read once per process with alembic's own Python API from nbgrader's migration
    folder; where that does not give exactly one head, nbgrader's command runs as before."""
    import nbgrader.api
    if getattr(nbgrader.api.get_alembic_version, "in_process", False):
        return
    command = nbgrader.api.get_alembic_version
    head: list[str] = []

    def get_alembic_version() -> str:
        if not head:
            try:
                from alembic.config import Config
                from alembic.script import ScriptDirectory
                from nbgrader.dbutil import ALEMBIC_DIR
                config = Config()
                config.set_main_option("script_location", ALEMBIC_DIR)
                heads = ScriptDirectory.from_config(config).get_heads()
                head.append(heads[0] if len(heads) == 1 else command())
            except Exception:  # noqa: BLE001  (whatever alembic's API did: the command, as nbgrader does)
                head.append(command())
        return head[0]
    get_alembic_version.in_process = True
    nbgrader.api.get_alembic_version = get_alembic_version


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
    """RuntimeError with nbgrader's log unless the NbGraderAPI call `what` succeeded."""
    if not result.get("success"):
        raise RuntimeError(f"nbgrader {what} failed:\n{result.get('error') or result.get('log')}")
