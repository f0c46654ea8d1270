"""`make lab`: a headless JupyterLab on release/ that prints its URL, with the
nbgrader and ipywidgets extensions loaded (the browser tests drive it further)."""
from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request

import pytest

from lab_server import running_lab


@pytest.fixture()
def lab():
    with running_lab() as (base, token):
        yield f"{base}/lab?token={token}"


def _get(url, tries: int = 20):
    """urlopen(url), retrying while the server is not yet listening."""
    for _ in range(tries):
        try:
            return urllib.request.urlopen(url, timeout=300)
        except urllib.error.URLError:
            time.sleep(0.5)  # the URL is printed a moment before the socket accepts
    return urllib.request.urlopen(url, timeout=30)


def test_lab_serves_release_with_the_extensions(lab):
    base, token = lab.split("/lab?token=")
    page = _get(lab).read().decode()
    config = json.loads(re.search(r'<script id="jupyter-config-data" type="application/json">(.*?)</script>',
                                  page, re.S).group(1))
    extensions = {e["name"] for e in config.get("federated_extensions", [])}
    assert {"@jupyter/nbgrader", "@jupyter-widgets/jupyterlab-manager"} <= extensions, extensions
    listing = json.load(urllib.request.urlopen(f"{base}/api/contents?token={token}", timeout=30))
    names = {item["name"] for item in listing["content"]}
    assert "00_tour" in names and "source" not in names, f"the lab must serve release/, got {names}"
    version = json.load(_get(f"{base}/nbgrader_version?version=0.9.6&token={token}"))
    assert version == {"success": True}, "nbgrader's Validate extension is not loaded, or of another version"


def test_validate_button_runs_on_a_release_notebook(lab):
    """What nbgrader's Validate button asks the server: the blank release notebook fails validation."""
    base, token = lab.split("/lab?token=")
    request = urllib.request.Request(f"{base}/assignments/validate", method="POST",
                                     data=json.dumps({"path": "00_tour/00_tour.ipynb"}).encode(),
                                     headers={"Authorization": f"token {token}", "Content-Type": "application/json"})
    answer = json.load(_get(request))
    assert answer["success"], answer
    report = answer["value"] if isinstance(answer["value"], dict) else json.loads(answer["value"])
    assert report.get("failed"), f"a blank notebook must fail validation, got {report}"
    assert any("NotImplementedError" in json.dumps(cell) for cell in report["failed"])
