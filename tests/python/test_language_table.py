"""docs/language.md (the table of triton.language names) matches what tilefuse.language
exports: scripts/language_table.py regenerates it; a stale file fails here."""

import importlib.util
from pathlib import Path

import tilefuse.language as tl

ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("language_table", ROOT / "scripts" / "language_table.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_docs_table_is_current():
    mod = _script()
    assert (ROOT / "docs" / "language.md").read_text() == mod.render(), "run: python scripts/language_table.py"


def test_table_rows_agree_with_the_package():
    mod = _script()
    rows = [line.split("|")[1:3] for line in mod.render().splitlines() if line.startswith("| `")]
    assert len(rows) == len(set(mod.TRITON_NAMES))
    for name, has in rows:
        assert (has.strip() == "yes") == hasattr(tl, name.strip().strip("`")), name
