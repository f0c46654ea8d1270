# JupyterHub's configuration for the course hub (`make hub` runs `jupyterhub -f` on it).
# Settings come from HUB_STATE/settings.json, written by hub/start.py from the
# Makefile's PORT, HUB_USERS, HUB_EXCHANGE, HUB_STATE, HUB_HOMES and HUB_IP.
#
#   login     PAM: the class's own Unix accounts (hub/accounts.py makes them from the user list)
#   servers   LocalProcessSpawner: each user's JupyterLab runs as that user, in their home (0700),
#             from HUB_STATE/runtime (hub/runtime.py), with nbgrader's Assignment List;
#             the instructor also gets formgrader on their course folder (~/course)
#   proxy     configurable-http-proxy from npm (scripts/setup.sh puts it in .venv/proxy)
#   database  SQLite, HUB_STATE/jupyterhub.sqlite
#   grading   the `grader` service (hub/grader_service.py): collect, `autograder grade`,
#             release feedback; only the instructor may open it
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import runtime  # noqa: E402
import settings as hub_settings  # noqa: E402
from jupyterhub.spawner import LocalProcessSpawner  # noqa: E402

c = get_config()  # noqa: F821
S = hub_settings.load(os.environ["HUB_STATE"])
ports = {k: int(v) for k, v in (p.split("=") for p in os.environ["HUB_INTERNAL_PORTS"].split(","))}

c.JupyterHub.ip = S.ip
c.JupyterHub.port = S.port
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = ports["hub"]
c.JupyterHub.db_url = f"sqlite:///{S.state / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(S.state / "jupyterhub_cookie_secret")
c.JupyterHub.pid_file = str(S.state / "jupyterhub.pid")
c.JupyterHub.cleanup_servers = True  # servers stop with the hub: `make hub` leaves nothing behind
c.JupyterHub.cleanup_proxy = True
c.JupyterHub.shutdown_on_logout = False
c.ConfigurableHTTPProxy.command = [str(S.repo / ".venv" / "proxy" / "node_modules" / ".bin" / "configurable-http-proxy")]
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{ports['proxy_api']}"
c.ConfigurableHTTPProxy.should_start = True

# Who may log in: the accounts of the user list, with their Unix passwords.
c.JupyterHub.authenticator_class = "pam"
c.PAMAuthenticator.open_sessions = False  # no login session bookkeeping (utmp) for a web login
c.Authenticator.allowed_users = set(S.roles)
c.Authenticator.admin_users = {S.instructor}
c.Authenticator.delete_invalid_users = True  # someone struck off the list loses their hub login

RUNTIME_ENV = runtime.environment(S.runtime)


class CourseSpawner(LocalProcessSpawner):
    """JupyterLab as the user, from the students' runtime, configured for their role."""

    def get_env(self):
        env = super().get_env()
        role = S.roles.get(self.user.name, "student")
        env.update(RUNTIME_ENV)
        env["JUPYTER_CONFIG_PATH"] = str(S.state / "config" / role)
        env["COURSE_HUB_ROLE"] = role
        return env


c.JupyterHub.spawner_class = CourseSpawner
c.Spawner.cmd = [str(S.runtime / "bin" / "jupyterhub-singleuser")]
c.Spawner.default_url = "/lab"
c.Spawner.notebook_dir = "~"
c.Spawner.env_keep = ["LANG", "LC_ALL"]  # not the hub's PATH or VIRTUAL_ENV: they name the repository
c.Spawner.http_timeout = 120
c.Spawner.start_timeout = 180

# The grader page: a service run by the hub (as root: it reads the repository's
# source/ and runs the bubblewrap sandbox), reachable by the instructor alone.
c.JupyterHub.services = [{
    "name": "grader",
    "display": True,
    "url": f"http://127.0.0.1:{ports['grader']}",
    "command": [sys.executable, str(S.repo / "hub" / "grader_service.py")],
    "environment": {"HUB_STATE": str(S.state)},
    "oauth_no_confirm": True,
}]
c.JupyterHub.load_roles = [
    {"name": "course-instructor", "users": [S.instructor],
     "scopes": ["access:services!service=grader", "self"]},
]
