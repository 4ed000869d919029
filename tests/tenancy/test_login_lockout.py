"""Password sign-in resists guessing: after LOGIN_FAILURE_LIMIT failures for one user, or from one client,
further attempts are refused with 429 for LOGIN_LOCKOUT_MINUTES, on the dashboard login and the admin
login alike, and no answer tells whether a user exists."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from tests.factories import PASSWORD

LIMIT = 5  # the default LOGIN_FAILURE_LIMIT


def attempt(username: str, password: str, ip: str = "10.0.0.1", url: str = "/login/"):
    return Client(REMOTE_ADDR=ip).post(url, {"username": username, "password": password})


def logged_in(response) -> bool:
    return response.status_code == 302 and "_auth_user_id" in response.client.session


def words(response) -> str:
    """The page's text without markup, the CSRF token and the username echoed in the form."""
    text = re.sub(r"<[^>]+>", " ", response.content.decode())
    text = re.sub(r'value="[^"]*"', "", text)
    return " ".join(text.split())


def test_the_right_password_signs_in(owner_a):
    assert logged_in(attempt("olivia-owner", PASSWORD))


def test_a_user_is_locked_out_after_the_limit_even_from_other_clients(owner_a):
    answers = [attempt("olivia-owner", "wrong", ip=f"10.0.1.{i}").status_code for i in range(LIMIT)]
    # The failure that reaches the limit is itself answered with the lockout.
    assert answers == [200] * (LIMIT - 1) + [429]

    locked = attempt("olivia-owner", PASSWORD, ip="10.0.2.1")

    assert locked.status_code == 429
    assert not logged_in(locked)
    assert "try again" in words(locked).lower()


def test_a_client_is_locked_out_after_the_limit_across_usernames(owner_a, viewer_a):
    for i in range(LIMIT):
        attempt(f"guess-{i}", "wrong", ip="10.0.3.3")

    locked = attempt("vera-viewer", PASSWORD, ip="10.0.3.3")
    elsewhere = attempt("vera-viewer", PASSWORD, ip="10.0.3.4")

    assert locked.status_code == 429 and not logged_in(locked)
    assert logged_in(elsewhere)


def test_a_success_before_the_limit_clears_the_users_failures(owner_a):
    for _ in range(LIMIT - 1):
        attempt("olivia-owner", "wrong")
    assert logged_in(attempt("olivia-owner", PASSWORD))
    for _ in range(LIMIT - 1):
        attempt("olivia-owner", "wrong", ip="10.0.0.9")

    assert logged_in(attempt("olivia-owner", PASSWORD, ip="10.0.0.9"))


def test_the_admin_login_is_locked_out_too(staff):
    for _ in range(LIMIT):
        attempt("sam-staff", "wrong", url="/admin/login/")

    locked = attempt("sam-staff", PASSWORD, url="/admin/login/")

    assert locked.status_code == 429
    assert not logged_in(locked)


@pytest.mark.parametrize("url", ["/login/", "/admin/login/"])
def test_answers_do_not_tell_whether_a_user_exists(owner_a, url):
    # The same words for a wrong password and an unknown user, before and after the lockout.
    wrong = attempt("olivia-owner", "wrong", url=url, ip="10.0.4.1")
    unknown = attempt("nobody-here", "wrong", url=url, ip="10.0.4.2")
    assert (wrong.status_code, words(wrong)) == (unknown.status_code, words(unknown))

    for _ in range(LIMIT):
        attempt("olivia-owner", "wrong", url=url, ip="10.0.5.1")
        attempt("nobody-here", "wrong", url=url, ip="10.0.5.2")
    locked_known = attempt("olivia-owner", "wrong", url=url, ip="10.0.5.1")
    locked_unknown = attempt("nobody-here", "wrong", url=url, ip="10.0.5.2")

    assert locked_known.status_code == locked_unknown.status_code == 429
    assert words(locked_known) == words(locked_unknown)


def test_the_lockout_follows_the_settings(owner_a, settings):
    settings.AXES_FAILURE_LIMIT = 2
    attempt("olivia-owner", "wrong")
    attempt("olivia-owner", "wrong")

    assert attempt("olivia-owner", PASSWORD).status_code == 429
