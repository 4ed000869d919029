"""What the service page's Revisions panel shows (`templates/portal/partials/revisions.html`): every revision
with what changed since the one before it, in the audit's words, and the diff of any two."""

from __future__ import annotations

from apps.core.ids import ascii_int
from apps.serving.models import Revision
from apps.serving.revisions import changes


def revisions_context(service, params=None) -> dict:
    """Rows newest first (each with its changes since the one before), and the diff asked for by
    `params` (`from`, `to`: revision numbers), with an error in words when one is unknown."""
    params = params or {}
    revisions = list(Revision.objects.filter(service=service).order_by("number"))
    rows = [{"revision": r, "changes": changes(revisions[i - 1].spec if i else None, r.spec)}
            for i, r in enumerate(revisions)]
    by_number = {r.number: r for r in revisions}
    current = revisions[-1].number if revisions else None
    context = {"service": service, "rows": rows[::-1], "current": current,
               "diff_from": ascii_int(params.get("from")) or (current - 1 if current and current > 1 else current),
               "diff_to": ascii_int(params.get("to")) or current, "diff": None, "diff_error": ""}
    if "from" in params or "to" in params:
        old, new = by_number.get(ascii_int(params.get("from"))), by_number.get(ascii_int(params.get("to")))
        if old is None or new is None:
            context["diff_error"] = "Choose two revisions of this service to compare."
        else:
            context["diff"] = {"from": old.number, "to": new.number, "changes": changes(old.spec, new.spec)}
    return context
