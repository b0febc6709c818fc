"""Every generated table in the docs is what its script prints from the committed data today.

docs/validation.md's generated block is checked in tests/test_validate.py; here the tables of
docs/calibration.md (docs/make_calibration_table.py) and of the Kimi-K2 case doc
(docs/cases/make_kimi_k2_case.py).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("script, doc", [("docs/make_calibration_table.py", "docs/calibration.md"),
                                         ("docs/cases/make_kimi_k2_case.py", "docs/cases/kimi-k2-pcie.md"),
                                         ("docs/make_comm_table.py", "docs/hardware.md"),
                                         ("docs/cases/make_seed_hypotheses.py", "docs/cases/seed-hypotheses.md"),
                                         ("docs/make_cases_table.py", "docs/engines.md")])
def test_every_table_line_the_script_prints_is_in_the_doc(script, doc):
    out = subprocess.run([sys.executable, str(ROOT / script)], capture_output=True, text=True, check=True,
                         cwd=ROOT).stdout
    table_lines = [line for line in out.splitlines() if line.startswith("|")]
    text = (ROOT / doc).read_text()
    assert table_lines, f"{script} printed no table"
    missing = [line for line in table_lines if line not in text]
    assert not missing, f"{doc} lacks {len(missing)} line(s) {script} prints now, e.g. {missing[0]}"
