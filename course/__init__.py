"""The student's side of the course: checks that compare your work with real
PyTorch, the widgets, and the `course` command.

In a notebook::

    from course import Checker
    check = Checker("00_tour")
    check("ex_gradient")   # this exercise's visible tests, in this kernel
    check()                # the whole saved notebook, in a fresh kernel
"""
from course.check import Checker
from course.devices import devices

__all__ = ["Checker", "devices"]
