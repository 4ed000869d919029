"""The favicon: /favicon.ico leads to an icon the static files serve, and pages link to it."""

from __future__ import annotations

from django.contrib.staticfiles import finders


def test_favicon_ico_redirects_to_the_static_icon(client, db):
    response = client.get("/favicon.ico")
    assert response.status_code == 301
    assert response["Location"].endswith("/favicon.svg")
    name = response["Location"].split("/static/", 1)[1]
    assert finders.find(name), f"{name} is not among the static files"


def test_pages_link_the_icon(client, db):
    html = client.get("/login/").content.decode()
    assert '<link rel="icon" href="/static/favicon.svg"' in html
