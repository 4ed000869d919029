"""Kubernetes `Status` errors raised by the store and the HTTP layer.

Every failure in kubesim is an `ApiError`; the HTTP layer turns it into the `Status` body the apiserver
sends, and in-process callers (controllers, admission hooks) catch or raise it directly.
"""

from __future__ import annotations


class ApiError(Exception):
    """A failed API call: HTTP code, apiserver reason, message and optional `details`."""

    def __init__(self, code: int, reason: str, message: str, details: dict | None = None):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> dict:
        """The `Status` object the apiserver returns for this error."""
        body = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            # the apiserver omits empty detail fields (omitempty), e.g. the core group ""
            body["details"] = {k: v for k, v in self.details.items() if v not in ("", None)}
        return body

    def __repr__(self) -> str:
        return f"ApiError({self.code}, {self.reason!r}, {self.message!r})"

    # Constructors with the apiserver's wording. `gr` is the group-resource ("deployments.apps").

    @classmethod
    def not_found(cls, gr: str, name: str, group: str = "", plural: str = "") -> ApiError:
        return cls(404, "NotFound", f'{gr} "{name}" not found', {"name": name, "group": group, "kind": plural})

    @classmethod
    def path_not_found(cls) -> ApiError:
        return cls(404, "NotFound", "the server could not find the requested resource", {})

    @classmethod
    def already_exists(cls, gr: str, name: str, group: str = "", plural: str = "") -> ApiError:
        return cls(409, "AlreadyExists", f'{gr} "{name}" already exists',
                   {"name": name, "group": group, "kind": plural})

    @classmethod
    def conflict(cls, gr: str, name: str, group: str = "", plural: str = "") -> ApiError:
        return cls(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on {gr} "{name}": the object has been modified; '
            "please apply your changes to the latest version and try again",
            {"name": name, "group": group, "kind": plural},
        )

    @classmethod
    def invalid(cls, kind: str, gr_kind: str, name: str, group: str, causes: list[dict]) -> ApiError:
        """422 Invalid; `causes` are `{"reason","message","field"}` dicts, `gr_kind` e.g. "Deployment.apps"."""
        parts = [f"{c['field']}: {c['message']}" for c in causes]
        summary = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
        return cls(
            422,
            "Invalid",
            f'{gr_kind} "{name}" is invalid: {summary}',
            {"name": name, "group": group, "kind": kind, "causes": causes},
        )

    @classmethod
    def bad_request(cls, message: str) -> ApiError:
        return cls(400, "BadRequest", message)

    @classmethod
    def forbidden(cls, gr: str, name: str, message: str, group: str = "", plural: str = "") -> ApiError:
        """403 Forbidden with the apiserver's `<gr> "<name>" is forbidden: <message>` wording."""
        return cls(403, "Forbidden", f'{gr} "{name}" is forbidden: {message}',
                   {"name": name, "group": group, "kind": plural})

    @classmethod
    def method_not_allowed(cls) -> ApiError:
        return cls(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")

    @classmethod
    def unsupported_media_type(cls, content_type: str) -> ApiError:
        return cls(
            415,
            "UnsupportedMediaType",
            'the body of the request was in an unknown format - accepted media types include: '
            'application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml',
            {},
        )

    @classmethod
    def expired(cls, requested: int, oldest: int) -> ApiError:
        return cls(410, "Expired", f"too old resource version: {requested} ({oldest})")

    @classmethod
    def unauthorized(cls) -> ApiError:
        return cls(401, "Unauthorized", "Unauthorized")
