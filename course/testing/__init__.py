"""The course's test kit: what every chapter's tests and the project's own tests are made of.

- `for_random_inputs(test)`, `Draws`: one random-input protocol; a test is a function of `draw`, its
  inputs are fresh on every run (the grader's stream while grading), and a failing input is shrunk;
  `with_fixed_inputs(check)`: a check with fixed inputs, which a seed sweep runs once.
- `random_shape`, `random_layout`, `broadcast_family`, `matmul_shapes`, `matmul_operand`, `same_layout_copy`,
  `leaf_copy`: inputs in the layouts that break a framework (non-contiguous, expanded, sliced, size 0).
- `Op`, `random_op`, `random_index`, `chain_text`: view operations as data, for chains of views.
- `same_call(fn, args, what, ours=...)`, `same_outcome(ours_call, torch_call, what)`: run both sides and
  compare values, layout, aliasing, gradients and errors; `same_error`: only the errors; `same_chain`,
  `same_random_chain`: the same after every step of a chain of views.
- `float32_tolerances(f, args)`: how far a correct float32 answer may land from torch's here, measured.
- `describe`, `layout`, `short`: how a message names a value.

Comparison itself is `course.compare`; the random stream is `course.inputs`.
"""
from course.testing.describe import describe, layout, short
from course.testing.rounding import ROUNDING_SLACK, float32_tolerances
from course.testing.draws import Draws, for_random_inputs, with_fixed_inputs
from course.testing.layouts import (broadcast_family, leaf_copy, matmul_operand, matmul_shapes, random_layout,
                                    random_shape, same_layout_copy)
from course.testing.same_call import (call_yours, fail, same_call, same_chain, same_error, same_outcome,
                                      same_random_chain)
from course.testing.views import (LAYOUT_OPS, Op, chain_text, index_text, random_dim, random_index, random_op,
                                  random_view_shape)

__all__ = ["Draws", "for_random_inputs", "with_fixed_inputs", "random_shape", "random_layout", "broadcast_family",
           "matmul_shapes", "matmul_operand", "same_layout_copy",
           "leaf_copy", "Op", "LAYOUT_OPS", "random_op", "random_index", "random_dim", "random_view_shape", "chain_text",
           "index_text", "same_call", "same_outcome", "same_error", "same_chain", "same_random_chain", "call_yours", "fail", "describe", "layout", "short",
           "float32_tolerances", "ROUNDING_SLACK"]
