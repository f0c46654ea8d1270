# The two commands: `make lab` starts the course, `make test` runs every test.
# Both set up .venv themselves on first use (scripts/setup.sh).
PORT ?= 8888
# `make lab` serves WORK, the student's own copy of the chapters: made from release/ on first start, a
# chapter at a time (a chapter already there is never touched), ignored by git. RELEASE=FOLDER serves
# FOLDER itself instead.
WORK ?= work
RELEASE ?=
LAB_ARGS ?=
# JupyterLab settings the course ships (jupyter/lab/settings/overrides.json): no news toast over the notebook
LAB_SETTINGS := $(CURDIR)/jupyter/lab/settings
VENV := .venv/bin
# Jupyter refuses to run as root unless told; containers and CI machines often are root.
ALLOW_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root)
# `make hub`: the class's JupyterHub (hub/start.py; README, "As an instructor").
HUB_USERS ?= hub/users.txt
HUB_EXCHANGE ?= /srv/nbgrader/exchange
HUB_STATE ?= /srv/course-hub
HUB_HOMES ?= /home
HUB_IP ?= 127.0.0.1
HUB_ARGS ?=

.PHONY: lab test sweep build check-release bench setup

setup:
	@scripts/setup.sh

lab: setup
	$(if $(RELEASE),,@$(VENV)/course copy-release release $(WORK))
	$(VENV)/jupyter lab --no-browser --ip=127.0.0.1 --port=$(PORT) --ServerApp.root_dir=$(or $(RELEASE),$(WORK)) \
		--LabApp.app_settings_dir=$(LAB_SETTINGS) $(ALLOW_ROOT) $(LAB_ARGS)

.PHONY: hub
hub: setup
	$(VENV)/python hub/start.py --port $(PORT) --ip $(HUB_IP) --users $(HUB_USERS) --exchange $(HUB_EXCHANGE) --state $(HUB_STATE) --homes $(HUB_HOMES) $(HUB_ARGS)

# stop the hub of HUB_STATE (it gives the repository its mode back); hub-remove also deletes the accounts it made
.PHONY: hub-stop hub-remove
hub-stop:
	$(VENV)/python hub/start.py --stop --state $(HUB_STATE)

hub-remove:
	$(VENV)/python hub/start.py --remove --state $(HUB_STATE)

test: setup
	$(VENV)/python -m pytest -n auto --dist loadgroup

# Every chapter's solution under 50 seeds of its hidden tests' inputs (`make test` tries 3), and the checks of the
# machinery that `make test` runs on two or three chapters (plain nbgrader's verdicts, check()'s wrong answer, a
# student's pass in JupyterLab in Chromium) on every chapter: before a release, and whenever a test's inputs or tolerances
# change (tests/chapters/test_seed_sweep.py).
sweep: setup
	COURSE_SWEEP_SEEDS=50 COURSE_EVERY_CHAPTER=1 $(VENV)/python -m pytest -n auto --dist loadgroup \
		tests/chapters/test_seed_sweep.py tests/chapters/test_chapters.py::test_plain_nbgrader_gives_the_same_verdicts \
		tests/kit/test_check.py::test_wrong_answer_fails_with_its_teaching_message_and_nothing_hidden_runs \
		tests/browser/test_in_browser.py

build: setup
	$(VENV)/autograder build

check-release: setup
	$(VENV)/autograder build --check

bench: setup
	$(VENV)/python benchmarks/run.py --quick
