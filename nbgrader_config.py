# nbgrader's configuration for this course folder (source/ and release/ follow
# nbgrader's conventions, so formgrader and the nbgrader CLI work here too).
c = get_config()  # noqa: F821

# A chapter's text form (source/NN_name/NN_name.py) holds its solutions and hidden
# tests: plain `nbgrader generate_assignment` must never copy it into release/.
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", "[0-9][0-9]_*.py"]

# A chapter's last cell, check(), re-runs the saved notebook in a fresh kernel for the student. In a
# kernel nbgrader starts itself (autograde, the Validate button) it would run every test a second time
# and change no grade; COURSE_CHECK_RUNNING makes it return at once (course/check.py). exec_lines run
# before the first cell and bind no name in the notebook's namespace.
c.Execute.extra_arguments = ["--IPKernelApp.exec_lines=__import__('os').environ.__setitem__('COURSE_CHECK_RUNNING', '1')"]
