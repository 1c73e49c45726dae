"""The dead-letter reasons are one documented list, and the ad-click state key is one-to-one."""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from pipelines.dead_letters import REASONS, Reason
from pipelines.jobs.keys import split_window_key, window_key

README = Path(__file__).resolve().parents[3] / "README.md"


def test_the_readme_documents_every_reason():
    text = README.read_text()
    start = text.index("**Dead letters**")
    # The table ends where the README's next section begins; later tables are not reasons.
    end = text.find("\n## ", start)
    section = text[start : end if end != -1 else len(text)]
    documented = re.findall(r"^\| `([^`]+)` \|", section, re.MULTILINE)
    for reason in Reason:
        assert any(reason.value.startswith(head) for head in documented), (
            f"README.md's Dead letters table misses {reason.name}: {reason.value!r}"
        )
    assert len(documented) == len(REASONS) == len(Reason)


@given(st.text(), st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_a_window_key_splits_back_into_its_campaign_and_window(campaign, start):
    assert split_window_key(window_key(campaign, start)) == (campaign, start)


@given(
    st.text(alphabet="ab|1-", max_size=6),
    st.integers(-20, 20),
    st.text(alphabet="ab|1-", max_size=6),
    st.integers(-20, 20),
)
def test_different_windows_never_share_a_key(campaign_a, start_a, campaign_b, start_b):
    if (campaign_a, start_a) != (campaign_b, start_b):
        assert window_key(campaign_a, start_a) != window_key(campaign_b, start_b)
