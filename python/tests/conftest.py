"""What the tests share: a fresh interpreter per test that loads the library (the library reads
its settings once per process)."""

import json
import subprocess
import sys
import tempfile
import textwrap

import pytest


def run_fresh(code: str, timeout: int = 120) -> dict:
    """Run ``code`` in a fresh interpreter, outside the source tree (so it imports the installed
    package, with its library); it prints one JSON line last, which is returned."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=tempfile.gettempdir(),
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture
def fresh():
    return run_fresh


def refusal_message(setup: str, call: str) -> str:
    """Run ``setup`` then ``call`` in a fresh interpreter; ``call`` must raise
    ``AlignmallocError``, whose message is returned."""
    body = textwrap.dedent(setup).strip() + "\n" if setup.strip() else ""
    out = run_fresh(
        "import json, alignmalloc\n"
        + body
        + "try:\n"
        + f"    {call}\n"
        + '    print(json.dumps({"raised": False}))\n'
        + "except alignmalloc.AlignmallocError as e:\n"
        + '    print(json.dumps({"raised": True, "message": str(e)}))\n'
    )
    assert out["raised"], f"{call} was not refused"
    return out["message"]


@pytest.fixture
def refused():
    return refusal_message
