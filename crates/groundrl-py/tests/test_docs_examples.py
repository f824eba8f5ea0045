"""Every Python example of README.md and docs/python.md, run as a script in an empty folder (not the
repository), with the installed wheel. The files an example reads are made there first: the COCO
example's annotation and results files are the committed parity fixture under the names it uses.
The TRL example needs torch and TRL: tests/trl/test_grpo.py runs it in the TRL environment."""

import re
import shutil
import subprocess
import sys

import pytest
from conftest import COCO_FIXTURE, ROOT


def examples():
    out = []
    for doc in ("README.md", "docs/python.md"):
        text = (ROOT / doc).read_text()
        for match in re.finditer(r"```python\n(.*?)```", text, re.S):
            line = text[: match.start()].count("\n") + 1
            out.append(pytest.param(match.group(1), id=f"{doc}:{line}"))
    return out


EXAMPLES = examples()


def needs_trl(code):
    return "from trl import" in code


def test_the_docs_have_the_examples_this_test_knows():
    codes = [p.values[0] for p in EXAMPLES]
    assert len(codes) == 4 and sum(needs_trl(c) for c in codes) == 1


@pytest.mark.parametrize("code", EXAMPLES)
def test_example_runs_from_an_empty_folder(code, tmp_path):
    if needs_trl(code):
        pytest.skip("needs torch and TRL: run by tests/trl/test_grpo.py in the TRL environment")
    shutil.copy(COCO_FIXTURE / "gt.json", tmp_path / "instances_val2017.json")
    shutil.copy(COCO_FIXTURE / "dt.json", tmp_path / "detections.json")
    (tmp_path / "example.py").write_text(code)
    out = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    # A `print(...)  # expected` line: the printed text is the comment.
    for line in code.splitlines():
        printed = re.match(r"print\(.*\)\s+#\s*(.+)$", line)
        if printed:
            assert printed.group(1).strip() in out.stdout, (printed.group(1), out.stdout)
