"""The browsable API for people: the same pages for everyone, its forms for platform staff only.

DRF's HTML forms list every choice of a related field (every username on memberships, every cluster on
services, every model in a filter), which would show tenants names they may not see. Tenants use the
JSON API, the docs and the portal; staff, who may see everything, keep the forms.
"""

from __future__ import annotations

from rest_framework import renderers

from apps.core.access import is_platform_staff


class BrowsableAPIRenderer(renderers.BrowsableAPIRenderer):
    def show_form_for_method(self, view, method, request, obj):
        return is_platform_staff(request.user) and super().show_form_for_method(view, method, request, obj)

    def get_rendered_html_form(self, data, view, method, request):
        if not is_platform_staff(request.user):
            return None
        return super().get_rendered_html_form(data, view, method, request)

    def get_raw_data_form(self, data, view, method, request):
        if not is_platform_staff(request.user):
            return None
        return super().get_raw_data_form(data, view, method, request)

    def get_filter_form(self, data, view, request):
        if not is_platform_staff(request.user):
            return None
        return super().get_filter_form(data, view, request)
