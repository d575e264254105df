"""Solutions to the notebooks' exercises, one module per notebook (nb01.py ... nb10.py).

Try the exercise first; the check cell under it says what is wrong without giving the answer.
To use a solution in a notebook, replace the body of the exercise cell with an import, e.g.
`from solutions.nb03 import my_residual` (the notebooks run from this folder's parent, so
`solutions` is importable there). The tests run every notebook that way
(tests/test_exercises.py).
"""
