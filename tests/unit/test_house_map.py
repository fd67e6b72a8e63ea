"""README.md's map of the house is the code's own (scripts/house.py), so it cannot drift again."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_readme_map_is_made_from_the_packages_docstrings():
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "house.py"), "--check"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
