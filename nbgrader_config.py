# nbgrader's configuration for this course folder (source/ and release/ follow
# nbgrader's conventions, so formgrader and the nbgrader CLI work here too).
c = get_config()  # noqa: F821

# A chapter's text form (source/NN_name/NN_name.py) holds its solutions and hidden
# tests: plain `nbgrader generate_assignment` must never copy it into release/.
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", "[0-9][0-9]_*.py"]
