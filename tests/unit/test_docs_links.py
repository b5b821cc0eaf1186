"""The repository's Markdown links and pictures point at files that exist."""
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def _tracked_markdown() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files", "*.md"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [ROOT / p for p in out.split()]


def test_every_relative_link_in_the_docs_resolves():
    broken = []
    for doc in _tracked_markdown():
        for target in LINK.findall(doc.read_text()):
            if not target.startswith(("http://", "https://", "mailto:")) \
                    and not (doc.parent / target).exists():
                broken.append(f"{doc.relative_to(ROOT)} -> {target}")
    assert broken == []


def test_a_generated_table_links_its_plot_from_wherever_it_is_shown(tmp_path):
    from benchmarks import common

    out, readme = tmp_path / "results", tmp_path / "README.md"
    out.mkdir()
    readme.write_text("top\n<!-- s -->\nstale\n<!-- e -->\nend\n")
    common.write_outputs("x", "X", {"k": 1}, "| a |\n\n", lambda d, p: p.write_bytes(b"png"),
                         out, readme, ("<!-- s -->", "<!-- e -->"), image="x plot")
    for doc in (out / "x.md", readme):
        links = re.findall(r"!\[x plot\]\(([^)]+)\)", doc.read_text())
        assert len(links) == 1 and (doc.parent / links[0]).read_bytes() == b"png"
