"""A class's submissions -> grades, gradebook, feedback and report (`autograder grade`).

    from autograder.grade import grade_class
    graded = grade_class("01_tensor", "class/", "out/")

The pipeline, one module a stage:

    intake        the submissions: a folder or a zip, unpacked safely, one Submission per student
    repair        a submitted notebook put back into the release's shape, pass by pass
    grader        one chapter's Grader: nbgrader on a throwaway course folder, cells run in the sandbox
    workers       many submissions at once on local processes, each with its own Grader
    distributed   the same on a Dask cluster, and the record that lets a run resume
    gradebook     the class's nbgrader gradebook
    feedback      the page each student gets back
    report        the class report for the instructor
    pipeline      all of it for one class: grade_class(chapter, submissions, out, options)
    cli           the `autograder grade` command line, a thin caller of grade_class

Only `pipeline` is imported with the package (it imports the others when it runs).
"""

from autograder.grade.pipeline import ClassResult, GradeError, GradeOptions, GradingInterrupted, grade_class

__all__ = ["ClassResult", "GradeError", "GradeOptions", "GradingInterrupted", "grade_class"]
