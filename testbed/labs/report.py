"""OUT/index.html of a lab, and the index page of `rocelab lab all`.

One self-contained page per lab (plots embedded as data: URIs, no scripts, no network),
rendered from testbed/labs/templates/*.html.j2 with Jinja2 (autoescaped): the paper's
figure beside the measured one for every finding, each seed's phase table, the plots
with their captions, links to the captures, and the exact command that made it.
"""
import base64
from pathlib import Path

TEMPLATES = Path(__file__).with_name("templates")


def _environment():
    from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
    env = Environment(loader=FileSystemLoader(str(TEMPLATES)), autoescape=select_autoescape(["html", "j2"]),
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["cell"] = _cell
    return env


def _cell(value, fmt="{}"):
    if value is None:
        return "-"
    try:
        return fmt.format(value)
    except (TypeError, ValueError):
        return str(value)


def _data_uri(path):
    return "data:image/png;base64," + base64.b64encode(Path(path).read_bytes()).decode("ascii")


def write_lab_page(result, out):
    """Render OUT/index.html for one lab's result (lab.json's dict); returns its path."""
    out = Path(out)
    plots = [dict(p, src=_data_uri(out / p["file"])) for p in result.get("plots", []) if (out / p["file"]).is_file()]
    html = _environment().get_template("lab.html.j2").render(lab=result, plots=plots)
    path = out / "index.html"
    path.write_text(html, encoding="utf-8")
    return path


def write_index_page(labs, out, command, elapsed_s):
    """OUT/index.html of `rocelab lab all`: every lab's findings, linked to its own page.
    `labs`: [(name, result or None, error or None)] with each lab in OUT/<name>/."""
    out = Path(out)
    html = _environment().get_template("index.html.j2").render(labs=labs, command=command, elapsed_s=elapsed_s)
    path = out / "index.html"
    path.write_text(html, encoding="utf-8")
    return path
