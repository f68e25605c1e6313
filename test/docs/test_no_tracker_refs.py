"""No "issue N" / "run N" in code, comments or user docs: a tracker number or a training-run number means
nothing to a user, so each is written as what it means ("the shipped model", the fact itself). The training
log (models/TRAINING_LOG.md) is history and keeps its run numbers; the repository's history keeps the rest."""

from __future__ import annotations

import os
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
REF = re.compile(r"\b(?:issues?|runs?)[\s#-]+\d+\b", re.IGNORECASE)
SUFFIXES = {".py", ".md", ".yaml", ".yml", ".json", ".c", ".h", ".sh", ".toml", ".cfg", ".xml", ".txt"}
NAMES = {"Makefile"}
# History, third-party text, this test's own probe and generated trees: not ours to word, or not user docs.
EXCLUDED_FILES = {"models/TRAINING_LOG.md", "LICENSE", "test/docs/test_no_tracker_refs.py"}
EXCLUDED_DIRS = {"interfaces", "build", "install", "node_modules", "__pycache__"}


def scanned_files() -> list[Path]:
    out = []
    for root, dirs, files in os.walk(REPO):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in EXCLUDED_DIRS)
        for name in sorted(files):
            path = Path(root, name)
            rel = path.relative_to(REPO).as_posix()
            if (path.suffix in SUFFIXES or name in NAMES) and rel not in EXCLUDED_FILES:
                out.append(path)
    return out


def references(text: str) -> list[str]:
    return [m.group(0) for m in REF.finditer(text)]


def test_the_pattern_finds_the_forms_a_reference_takes() -> None:
    found = references("issue 20's targets; run 31 (shipped); Runs 13 and 15; issue #38; Issue-24")
    assert found == ["issue 20", "run 31", "Runs 13", "issue #38", "Issue-24"]
    assert references("the node runs on the DLA; 3 runs of 40 s; an issue with 2 frames") == []


def test_code_and_user_docs_name_no_issue_or_run_numbers() -> None:
    files = scanned_files()
    rels = {p.relative_to(REPO).as_posix() for p in files}
    assert {"README.md", "models/README.md", "dla_infer_node/core/pipeline.py", "Makefile"} <= rels
    assert "models/TRAINING_LOG.md" not in rels
    hits = []
    for path in files:
        for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            hits += [f"{path.relative_to(REPO)}:{n}: {ref!r}" for ref in references(line)]
    assert not hits, ("say what the number means to a user (or move the history to models/TRAINING_LOG.md):\n"
                      + "\n".join(hits))
