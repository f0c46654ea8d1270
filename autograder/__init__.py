"""The instructor's side of the course, in three parts whose names give the pipeline:

    autograder.build     source/ -> release/ and the reference framework
    autograder.grade     a class's submissions -> grades, gradebook, feedback and report
    autograder.sandbox   where a submission's code runs while it is graded

and what they share: where the chapters are (chapters), nbgrader's API on a
throwaway course folder (nbgrader_env) and the `autograder` command (cli).
"""

__all__ = ["build", "chapters", "cli", "grade", "nbgrader_env", "sandbox"]
