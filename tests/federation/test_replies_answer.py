"""An unmask answer is checked before it enters the sum (``replies.check_answer``): one
40-byte share per survivor, and one ring vector summing the pair masks with exactly the
dropped clients it names; anything else is refused with a public reason."""

import numpy as np
import pytest

from fedpriv.federation.replies import check_answer
from fedpriv.federation.secagg_common import UnmaskAnswer

N = 6
SHARES = {1: bytes(40), 2: bytes(40), 4: bytes(40)}
SUM = np.arange(N, dtype=np.uint64)


def _why(answer, dropped=(3, 5)):
    return check_answer(answer, survivors=[1, 2, 4], dropped=set(dropped), n=N)


def test_a_well_formed_answer_passes_with_and_without_dropped_clients():
    assert _why(UnmaskAnswer(shares=SHARES, lost=(3, 5), mask=SUM)) is None
    assert _why(UnmaskAnswer(shares=SHARES), dropped=()) is None


@pytest.mark.parametrize(
    ("answer", "dropped", "reason"),
    [
        (UnmaskAnswer(shares=SHARES, lost=(3,), mask=SUM), (3, 5), "each dropped client once"),
        (UnmaskAnswer(shares=SHARES, lost=(3, 3, 5), mask=SUM), (3, 5), "each dropped"),
        (UnmaskAnswer(shares=SHARES, lost=(3, 5)), (3, 5), "is a NoneType, not an array"),
        (UnmaskAnswer(shares=SHARES, mask=SUM), (), "a pair-mask sum with no dropped"),
        (UnmaskAnswer(shares=SHARES, lost=(3, 5), mask=SUM[:-1]), (3, 5), "shape (5,)"),
        (UnmaskAnswer(shares=SHARES, lost=(3, 5), mask=SUM.astype(np.int64)), (3, 5), "dtype"),
        (UnmaskAnswer(shares={1: bytes(40)}, lost=(3, 5), mask=SUM), (3, 5), "one per survivor"),
        (UnmaskAnswer(shares={**SHARES, 4: bytes(39)}, lost=(3, 5), mask=SUM), (3, 5), "40"),
        ("an answer", (3, 5), "not an unmask answer"),
    ],
)
def test_a_malformed_answer_is_refused_with_its_reason(answer, dropped, reason):
    why = _why(answer, dropped)
    assert why is not None and reason in why
