"""A pass means passed (issue 36): the visible tests alone, the ones a student runs before submitting, reject
at least 90 % of each chapter's typical mistakes (tests/mutants/). The hidden tests try the same rules on fresh
inputs; a mutant that hard-codes the visible cases is the one kind only they may catch (`hard_codes_visible`)."""
from __future__ import annotations

import pytest

from conftest import CHAPTERS
from notebook_runs import mutant_verdicts, mutants_of

pytestmark = pytest.mark.slow
VISIBLE_SHARE = 0.9


def visible_verdicts(chapter):
    """[(exercise, what is wrong, Mutant, Verdict)] of every mutant of the chapter against its visible tests."""
    cases = [(ex, name, m) for ex, by_name in mutants_of(chapter).items() for name, m in by_name.items()]
    verdicts = mutant_verdicts(chapter, [(ex, m.code, m.judged) for ex, _, m in cases], visible_only=True)
    return [(ex, name, m, v) for (ex, name, m), (_, v) in zip(cases, verdicts)]


@pytest.mark.parametrize("chapter", CHAPTERS, ids=[c.id for c in CHAPTERS])
def test_visible_tests_reject_typical_mistakes(chapter):
    results = visible_verdicts(chapter)
    honest = [(ex, name, v) for ex, name, m, v in results if not m.hard_codes_visible]
    passed = [f"{ex}: {name}" for ex, name, v in honest if v.status not in ("failed", "error")]
    share = 1 - len(passed) / max(len(honest), 1)
    print(f"{chapter.id}: the visible tests reject {share:.0%} of {len(honest)} typical mistakes")
    assert share >= VISIBLE_SHARE, (
        f"{chapter.id}: the visible tests reject only {share:.0%} of the typical mistakes (at least "
        f"{VISIBLE_SHARE:.0%} wanted); these pass every visible test:\n" + "\n".join(passed))
    unnamed = [ex for ex, name, m, v in results if m.hard_codes_visible and "hard-code" not in name]
    assert not unnamed, f"a mutant exempt as hard-coded must say so in its description: {unnamed}"
