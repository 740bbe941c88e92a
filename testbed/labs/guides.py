"""Paste what a lab measured into its guide, so a guide's figures are printed by the lab.

Each guide (topologies/labs/NAME.md) holds its measured block between two markers; this
replaces the block with the `findings.md` a run of the lab wrote:

    python -m testbed.labs.guides /tmp/labs-all        # every OUT/NAME/findings.md found
"""
import sys
from pathlib import Path

BEGIN = "<!-- begin measured -->"
END = "<!-- end measured -->"
GUIDES = Path(__file__).resolve().parents[2] / "topologies" / "labs"


class GuideError(ValueError):
    pass


def paste(guide, findings):
    """The guide's text with its measured block replaced by `findings` (Markdown)."""
    text = Path(guide).read_text()
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise GuideError(f"{guide}: no '{BEGIN}' ... '{END}' block to paste the measurements into")
    return text[:start + len(BEGIN)] + "\n" + findings.strip() + "\n" + text[end:]


def update_all(out_dir, guides=GUIDES):
    """Update the guide of every lab that has OUT_DIR/NAME/findings.md; returns the names."""
    done = []
    for findings in sorted(Path(out_dir).glob("*/findings.md")):
        guide = Path(guides) / f"{findings.parent.name}.md"
        if guide.exists():
            guide.write_text(paste(guide, findings.read_text()))
            done.append(findings.parent.name)
    return done


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print("usage: python -m testbed.labs.guides OUT_DIR  (a `rocelab lab all --out OUT_DIR` output)",
              file=sys.stderr)
        return 2
    try:
        names = update_all(argv[0])
    except GuideError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"updated {len(names)} guides: {', '.join(names) or 'none (no OUT_DIR/NAME/findings.md)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
