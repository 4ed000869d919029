"""The tenant portal: pages under `/t/<tenant>/…` where a member (or staff) works inside one tenant.

`scope.py` resolves the tenant and the caller's role for every page; each other module is one area
(overview, services, tokens, members, catalog, audit, playground). Forms live in `apps.web.forms`.
"""
