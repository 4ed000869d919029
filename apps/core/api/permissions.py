"""Object-level write permission. Reading is scoped by `restrict()` querysets, so an object a user
may not read is a 404 before this runs; a readable object the user may not change is a 403."""

from rest_framework.permissions import SAFE_METHODS, BasePermission

from apps.core.access import CHANGE, DELETE, allowed, is_platform_staff, refusal


class ObjectWritePermission(BasePermission):
    """Writes need the object's writer roles; a refusal names the caller's role and the roles that may."""

    message = "Your role does not allow changes here."

    def has_object_permission(self, request, view, obj) -> bool:
        if request.method in SAFE_METHODS:
            return True
        action = DELETE if request.method == "DELETE" else CHANGE
        if allowed(request.user, obj, action):
            return True
        self.message = refusal(request.user, obj, action)  # one instance per request: DRF reads it to answer 403
        return False


class IsPlatformStaff(BasePermission):
    """Staff acting without a tenant-bound token (such a token acts only within its tenant)."""

    message = "Platform staff only."

    def has_permission(self, request, view) -> bool:
        return is_platform_staff(request.user)
