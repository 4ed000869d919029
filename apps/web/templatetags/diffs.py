"""`{% for kind, line in entry.diff|diff_lines %}`: a unified diff's lines with what each one is."""

from django import template

register = template.Library()


@register.filter
def diff_lines(diff: str) -> list[tuple[str, str]]:
    """(kind, line) pairs: kind is "file", "hunk", "add", "del" or "ctx", for styling."""
    out = []
    for line in (diff or "").splitlines():
        if line.startswith(("---", "+++")):
            kind = "file"
        elif line.startswith("@@"):
            kind = "hunk"
        elif line.startswith("+"):
            kind = "add"
        elif line.startswith("-"):
            kind = "del"
        else:
            kind = "ctx"
        out.append((kind, line))
    return out
