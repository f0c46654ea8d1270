"""`make lab`: a headless JupyterLab on the student's working copy (work/, made from release/ and never
overwritten; RELEASE= serves a folder itself) that prints its URL, with the nbgrader and ipywidgets
extensions loaded and the course's JupyterLab settings (no news toast); the browser tests drive it further."""
from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from lab_server import running_lab

REPO = Path(__file__).resolve().parents[2]
MINE = "the student's own notebook, already there"


@pytest.fixture()
def work(tmp_path):
    """A working copy that already holds the student's 00_tour (a file of theirs) and nothing else."""
    work = tmp_path / "work"
    (work / "00_tour").mkdir(parents=True)
    (work / "00_tour" / "00_tour.ipynb").write_text(MINE)
    return work


@pytest.fixture()
def lab(work):
    with running_lab(work=work) as (base, token):
        yield f"{base}/lab?token={token}"


def _get(url, tries: int = 20):
    """urlopen(url), retrying while the server is not yet listening."""
    for _ in range(tries):
        try:
            return urllib.request.urlopen(url, timeout=300)
        except urllib.error.URLError:
            time.sleep(0.5)  # the URL is printed a moment before the socket accepts
    return urllib.request.urlopen(url, timeout=30)


def test_lab_serves_the_working_copy_with_the_extensions(lab, work):
    base, token = lab.split("/lab?token=")
    page = _get(lab).read().decode()
    config = json.loads(re.search(r'<script id="jupyter-config-data" type="application/json">(.*?)</script>',
                                  page, re.S).group(1))
    extensions = {e["name"] for e in config.get("federated_extensions", [])}
    assert {"@jupyter/nbgrader", "@jupyter-widgets/jupyterlab-manager"} <= extensions, extensions
    listing = json.load(urllib.request.urlopen(f"{base}/api/contents?token={token}", timeout=30))
    names = {item["name"] for item in listing["content"]}
    chapters = {p.name for p in (REPO / "release").iterdir() if p.is_dir()}
    assert names == chapters, f"the lab must serve the working copy of release/'s chapters, got {names}"
    # every chapter it lacked copied from release/, the one it had left as the student has it
    assert (work / "00_tour" / "00_tour.ipynb").read_text() == MINE
    for f in (REPO / "release").rglob("*"):
        if f.is_file() and f.relative_to(REPO / "release").parts[0] != "00_tour" and "__pycache__" not in f.parts:
            assert (work / f.relative_to(REPO / "release")).read_bytes() == f.read_bytes(), f
    settings = json.load(_get(f"{base}/lab/api/settings/@jupyterlab/apputils-extension:notification?token={token}"))
    # the course's overrides.json sets the defaults a student's settings start from
    assert settings["schema"]["properties"]["fetchNews"]["default"] == "false", "Jupyter's news must be off"
    version = json.load(_get(f"{base}/nbgrader_version?version=0.9.6&token={token}"))
    assert version == {"success": True}, "nbgrader's Validate extension is not loaded, or of another version"


def test_release_serves_that_folder_itself(tmp_path):
    """RELEASE=FOLDER: the lab serves FOLDER, and no working copy is made."""
    release = tmp_path / "release"
    (release / "99_mine").mkdir(parents=True)
    with running_lab(release, work=tmp_path / "work") as (base, token):
        listing = json.load(_get(f"{base}/api/contents?token={token}"))
    assert {item["name"] for item in listing["content"]} == {"99_mine"}
    assert not (tmp_path / "work").exists()


def test_validate_button_runs_on_a_release_notebook(tmp_path):
    """What nbgrader's Validate button asks the server: the blank release notebook fails validation."""
    with running_lab(work=tmp_path / "work") as (base, token):
        request = urllib.request.Request(f"{base}/assignments/validate", method="POST",
                                         data=json.dumps({"path": "00_tour/00_tour.ipynb"}).encode(),
                                         headers={"Authorization": f"token {token}",
                                                  "Content-Type": "application/json"})
        answer = json.load(_get(request))
    assert answer["success"], answer
    report = answer["value"] if isinstance(answer["value"], dict) else json.loads(answer["value"])
    assert report.get("failed"), f"a blank notebook must fail validation, got {report}"
    assert any("NotImplementedError" in json.dumps(cell) for cell in report["failed"])
