"""The dashboard mounted in Flask (``JobQ(app, dashboard=...)``) and Django
(``jobq.contrib.django.urls``): who may see it, its CSRF, its links."""

from __future__ import annotations

import inspect
import re
from typing import Any

import pytest
from dashboard_helpers import django_dead_job, no_autostart  # noqa: F401 (fixture)
from flask import Flask

from jobq import Fatal, Job, JobState
from jobq.contrib.flask import JobQ
from jobq.web import DashboardOptions

XSS = "<script>alert(1)</script>"
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"
PASSWORD = "a-password-for-tests"  # noqa: S105


def die(job: Job[Any]) -> None:
    raise Fatal(f"failed: {XSS}")


def flask_app(**options: Any) -> tuple[Flask, JobQ]:
    app = Flask("dashboard_test")
    app.config["JOBQ_AUTOSTART"] = False
    jobs = JobQ(app, handler=die, **options)
    jobs.state(app).queue.enqueue(XSS)
    jobs.state(app).queue.run_pending()
    return app, jobs


def test_flask_serves_the_dashboard_under_its_prefix_to_this_machine() -> None:
    app, _ = flask_app(dashboard="/admin/jobq")
    client = app.test_client()

    overview = client.get("/admin/jobq/")
    dead = client.get("/admin/jobq/jobs/dead")
    remote = client.get("/admin/jobq/", environ_base={"REMOTE_ADDR": "203.0.113.9"})
    proxied = client.get("/admin/jobq/", headers={"X-Forwarded-For": "203.0.113.9"})
    asset = client.get(
        "/admin/jobq/static/dashboard.js", environ_base={"REMOTE_ADDR": "203.0.113.9"}
    )

    assert overview.status_code == 200
    assert 'href="/admin/jobq/jobs/dead"' in overview.text
    assert 'href="/admin/jobq/job/1"' in dead.text
    assert XSS not in dead.text
    assert overview.headers["X-Frame-Options"] == "DENY"
    assert [remote.status_code, proxied.status_code, asset.status_code] == [403] * 3


def test_flask_behind_a_proxy_refuses_naming_the_option_to_let_others_in() -> None:
    app, _ = flask_app(dashboard="/jobq")
    checked, _ = flask_app(dashboard="/jobq", dashboard_auth=lambda: True)
    proxied = {"X-Forwarded-For": "203.0.113.9"}

    refused = app.test_client().get("/jobq/", headers=proxied)
    let_in = checked.test_client().get("/jobq/", headers=proxied)

    assert refused.status_code == 403
    assert "no request through a proxy" in refused.text
    for named in re.findall(r"(\w+)=\.\.\.", refused.text):  # real names
        assert named in inspect.signature(JobQ).parameters or named in (
            DashboardOptions.__annotations__
        )
    assert "JobQ(app, dashboard_auth=...) in Flask" in refused.text
    assert refused.text.count(";") == 1  # one sentence: what, then how
    assert let_in.status_code == 200


REBOUND = "http://rebind.attacker.example:5000"


def test_flask_without_dashboard_auth_refuses_another_host_and_origin() -> None:
    """DNS rebinding: a page of another name, resolved to 127.0.0.1."""
    app, jobs = flask_app(dashboard="/jobq")
    client = app.test_client()
    page = client.get("/jobq/job/1")
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found is not None

    rebound = client.get("/jobq/", base_url=REBOUND)
    cross = client.post(
        "/jobq/job/1/retry", data={"csrf": found.group(1)}, headers={"Origin": REBOUND}
    )

    assert (page.status_code, rebound.status_code, cross.status_code) == (200, 400, 403)
    record = jobs.state(app).queue.get(1)
    assert record is not None
    assert record.state is JobState.DEAD


def test_flask_serves_the_dashboard_hosts_given_and_dashboard_auth_any_host() -> None:
    app = Flask("dashboard_hosts")
    app.config.update(
        JOBQ_AUTOSTART=False, JOBQ_DASHBOARD="/q", JOBQ_DASHBOARD_HOSTS=["devbox.test"]
    )
    JobQ(app, handler=die)
    checked, _ = flask_app(dashboard="/q", dashboard_auth=lambda: True)
    given, _ = flask_app(dashboard="/q", dashboard_hosts=("devbox.test",))

    def status(served: Flask, base_url: str) -> int:
        return served.test_client().get("/q/", base_url=base_url).status_code

    assert status(app, "http://devbox.test") == 200
    assert status(app, REBOUND) == 400
    assert status(given, "http://devbox.test") == 200
    assert status(checked, REBOUND) == 200


def test_flask_dashboard_auth_decides_and_actions_need_the_csrf_token() -> None:
    allowed = {"yes": False}
    app, jobs = flask_app(dashboard="/jobq", dashboard_auth=lambda: allowed["yes"])
    queue = jobs.state(app).queue
    client = app.test_client()

    assert client.get("/jobq/").status_code == 403
    assert client.get("/jobq/stats.json").status_code == 403
    allowed["yes"] = True
    page = client.get("/jobq/job/1", environ_base={"REMOTE_ADDR": "203.0.113.9"})
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found is not None

    refused = client.post("/jobq/job/1/retry", data={"csrf": "wrong" * 9})
    assert refused.status_code == 403
    record = queue.get(1)
    assert record is not None
    assert record.state is JobState.DEAD

    done = client.post("/jobq/job/1/retry", data={"csrf": found.group(1)})
    assert done.status_code == 303
    assert done.location.endswith("/jobq/job/1?msg=retried")
    record = queue.get(1)
    assert record is not None
    assert record.state is JobState.PENDING


def test_flask_csrf_tokens_are_keyed_from_the_apps_secret_key() -> None:
    """Two processes of one app (behind a load balancer) agree; an app with
    another SECRET_KEY, or a cookie planted by a sibling subdomain, does not."""
    apps = {}
    for name, secret in [("first", "shared"), ("second", "shared"), ("other", "x")]:
        app, jobs = flask_app(dashboard="/jobq")
        app.config["SECRET_KEY"] = secret * 8  # set after init_app: read per request
        apps[name] = (app, jobs)
    client = apps["first"][0].test_client()
    found = re.search(r'name="csrf" value="([^"]+)"', client.get("/jobq/job/1").text)
    assert found is not None
    token = found.group(1)

    def retry(name: str, cookie: str) -> int:
        other = apps[name][0].test_client()
        other.set_cookie("jobq_csrf", cookie)
        return other.post("/jobq/job/1/retry", data={"csrf": cookie}).status_code

    assert retry("other", token) == 403
    assert retry("second", "a" * 43) == 403
    assert retry("second", token) == 303
    assert apps["second"][1].state(apps["second"][0]).queue.stats().dead == 0
    assert apps["other"][1].state(apps["other"][0]).queue.stats().dead == 1


def test_flask_config_keys_mount_a_read_only_dashboard() -> None:
    app = Flask("dashboard_config")
    app.config.update(
        JOBQ_AUTOSTART=False, JOBQ_DASHBOARD="/q", JOBQ_DASHBOARD_READ_ONLY=True
    )
    JobQ(app, handler=die)
    client = app.test_client()

    assert client.get("/q/").status_code == 200
    assert client.post("/q/job/1/retry").status_code == 403


def test_flask_refuses_an_empty_prefix() -> None:
    with pytest.raises(ValueError, match="prefix"):
        JobQ(Flask("bad"), dashboard="/")


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        (
            "JOBQ_DASHBOARD",
            123,
            "must be a path such as '/jobq' (str) or None, not 123",
        ),
        ("JOBQ_DASHBOARD_READ_ONLY", "false", "must be a bool, not 'false'"),
        (
            "JOBQ_DASHBOARD_HOSTS",
            "devbox.test",
            "must be a list of host names (str), not 'devbox.test'",
        ),
    ],
    ids=["prefix", "read-only", "hosts"],
)
def test_flask_refuses_a_dashboard_setting_of_the_wrong_type_naming_it(
    key: str, value: object, expected: str
) -> None:
    app = Flask("bad_dashboard")
    app.config.update({"JOBQ_AUTOSTART": False, "JOBQ_DASHBOARD": "/q", key: value})

    with pytest.raises(TypeError) as refused:
        JobQ(app, handler=die)

    assert str(refused.value) == f"app.config[{key!r}] {expected}"
    assert "/q/" not in [rule.rule for rule in app.url_map.iter_rules()]


@pytest.mark.parametrize(
    ("option", "value", "expected"),
    [
        ("dashboard", 123, "must be a path such as '/jobq' (str) or None, not 123"),
        ("dashboard_read_only", "false", "must be a bool, not 'false'"),
        (
            "dashboard_hosts",
            "devbox.test",
            "must be a list of host names (str), not 'devbox.test'",
        ),
    ],
    ids=["prefix", "read-only", "hosts"],
)
def test_flask_refuses_a_dashboard_argument_of_the_wrong_type_naming_it(
    option: str, value: object, expected: str
) -> None:
    arguments: dict[str, Any] = {"dashboard": "/q", option: value}

    with pytest.raises(TypeError) as refused:
        JobQ(Flask("bad_dashboard"), handler=die, **arguments)

    assert str(refused.value) == f"JobQ({option}=...) {expected}"


# -- Django ---------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("no_autostart")
def test_django_serves_the_dashboard_to_staff_only(django_user_model: Any) -> None:
    from django.test import Client

    job_id = django_dead_job()
    client = Client()
    assert client.get("/admin/jobq/").status_code == 302  # to log in
    user = django_user_model.objects.create_user("ann", is_staff=False)
    client.force_login(user)
    assert client.get("/admin/jobq/stats.json").status_code == 403
    assert (
        client.get("/admin/jobq/").content
        == b"forbidden: the jobq dashboard is for staff"
    )
    user.is_staff = True
    user.save()

    overview = client.get("/admin/jobq/")
    job = client.get(f"/admin/jobq/job/{job_id}")

    assert overview.status_code == 200
    assert 'href="/admin/jobq/jobs/dead"' in overview.text
    assert 'name="csrfmiddlewaretoken"' in job.text
    assert overview["Content-Security-Policy"].startswith("default-src 'none'")


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("no_autostart")
def test_django_actions_use_djangos_csrf_check(django_user_model: Any) -> None:
    from django.test import Client

    from jobq.contrib.django import get_queue

    job_id = django_dead_job()
    client = Client(enforce_csrf_checks=True)
    client.force_login(django_user_model.objects.create_user("bo", is_staff=True))
    page = client.get(f"/admin/jobq/job/{job_id}")
    found = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    assert found is not None

    refused = client.post(f"/admin/jobq/job/{job_id}/retry", {})
    record = get_queue().get(job_id)
    assert refused.status_code == 403
    assert record is not None
    assert record.state is JobState.DEAD

    done = client.post(
        f"/admin/jobq/job/{job_id}/retry", {"csrfmiddlewaretoken": found.group(1)}
    )
    assert done.status_code == 303
    assert done["Location"] == f"/admin/jobq/job/{job_id}?msg=retried"
    record = get_queue().get(job_id)
    assert record is not None
    assert record.state is JobState.PENDING
    get_queue().cancel(job_id)


@pytest.mark.parametrize(
    ("setting", "value", "expected"),
    [
        (
            "JOBQ_DASHBOARD_READ_ONLY",
            "false",
            "jobq.E003: settings.JOBQ_DASHBOARD_READ_ONLY must be a bool, not 'false'.",
        ),
        (
            "JOBQ_DASHBOARD_ACCESS",
            123,
            "jobq.E003: settings.JOBQ_DASHBOARD_ACCESS must be a dotted path (str) "
            "of a function of the request returning a bool, or None, not 123.",
        ),
        (
            "JOBQ_DASHBOARD_ACCESS",
            "djapp.nowhere.check",
            "jobq.E005: settings.JOBQ_DASHBOARD_ACCESS 'djapp.nowhere.check' cannot "
            "be imported",
        ),
    ],
    ids=["read-only", "access-type", "access-import"],
)
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("no_autostart")
def test_django_refuses_a_dashboard_setting_of_the_wrong_type_naming_it(
    django_user_model: Any, setting: str, value: object, expected: str
) -> None:
    from django.core.exceptions import ImproperlyConfigured
    from django.test import Client, override_settings

    from jobq.contrib.django import checks

    client = Client()
    client.force_login(django_user_model.objects.create_user("di", is_staff=True))

    with override_settings(**{setting: value}):
        found = [f"{m.id}: {m.msg}" for m in checks.check_settings()]
        with pytest.raises(ImproperlyConfigured) as refused:
            client.get("/admin/jobq/")

    assert len(found) == 1
    assert found[0].startswith(expected)
    assert str(refused.value).startswith(expected)


def signed_in(django_user_model: Any, name: str, **fields: Any) -> Any:
    """A Django test client signed in as a new staff user ``name``."""
    from django.test import Client

    client = Client()
    user = django_user_model.objects.create_user(name, is_staff=True, **fields)
    client.force_login(user)
    return client


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("no_autostart")
def test_django_sends_an_anonymous_user_to_the_admin_s_login_and_back(
    django_user_model: Any,
) -> None:
    from django.test import Client

    django_user_model.objects.create_user("eve", password=PASSWORD, is_staff=True)
    client = Client()

    page = client.get("/admin/jobq/jobs/dead?key=a&task=b")
    poll = client.get("/admin/jobq/stats.json")
    logged_in = client.post(
        "/admin/login/",
        {
            "username": "eve",
            "password": PASSWORD,
            "next": "/admin/jobq/jobs/dead?key=a&task=b",
        },
    )

    assert page.status_code == 302
    assert (
        page["Location"]
        == "/admin/login/?next=/admin/jobq/jobs/dead%3Fkey%3Da%26task%3Db"
    )
    assert poll["Location"] == "/admin/login/?next=/admin/jobq/stats.json"
    assert logged_in["Location"] == "/admin/jobq/jobs/dead?key=a&task=b"
    assert client.get(logged_in["Location"]).status_code == 200


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("no_autostart")
def test_django_outside_the_admin_logs_in_at_login_url_and_has_no_admin_frame(
    django_user_model: Any,
) -> None:
    from django.test import Client, override_settings

    from jobq.contrib.django.checks import check_dashboard_urls

    client = Client()
    with override_settings(
        ROOT_URLCONF="djproject.urls_dashboard_only", LOGIN_URL="/accounts/login/"
    ):
        anonymous = client.get("/jobq/")
        client.force_login(django_user_model.objects.create_user("fa", is_staff=True))
        page = client.get("/jobq/")
        found = check_dashboard_urls()

    assert anonymous["Location"] == "/accounts/login/?next=/jobq/"
    assert page.status_code == 200
    assert 'id="frame"' not in page.text
    assert '<a class="brand" href="/jobq/">jobq</a>' in page.text
    assert found == []


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("no_autostart")
def test_django_under_the_admin_keeps_the_admin_s_header_links_and_breadcrumbs(
    django_user_model: Any,
) -> None:
    job_id = django_dead_job()
    client = signed_in(django_user_model, "gi", password=PASSWORD, first_name=XSS)

    page = client.get(f"/admin/jobq/job/{job_id}").text
    listed = client.get("/admin/jobq/jobs/dead").text

    assert (
        '<div id="branding"><a href="/admin/">Django administration</a></div>' in page
    )
    assert f"Welcome, <strong>{ESCAPED}</strong>." in page
    assert '<a href="/">View site</a>' in page
    assert '<a href="/admin/password_change/">Change password</a>' in page
    logout = re.search(
        r'<form id="logout-form" method="post" action="/admin/logout/">'
        r'<input type="hidden" name="csrfmiddlewaretoken" value="[^"]+">',
        page,
    )
    assert logout is not None
    crumbs = (
        '<a href="/admin/">Home</a> &rsaquo; <a href="/admin/jobq/">jobq</a> &rsaquo; '
    )
    assert f"{crumbs}Job {job_id}</nav>" in page
    assert f"{crumbs}Dead</nav>" in listed
    assert XSS not in page


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("no_autostart")
def test_django_s_admin_index_links_to_the_dashboard(django_user_model: Any) -> None:
    client = signed_in(django_user_model, "ho")

    index = client.get("/admin/")

    assert index.status_code == 200
    link = re.search(
        r'<div class="app-jobq module" id="jobq-dashboard-link">(.*?)</div>',
        index.text,
        re.S,
    )
    assert link is not None
    assert '<a href="/admin/jobq/">Dashboard</a>' in link.group(1)
    assert 'id="content-main"' in index.text  # the admin's own index around it


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("no_autostart")
def test_django_mounted_after_the_admin_is_shadowed_and_the_check_says_where_to_put_it(
    django_user_model: Any,
) -> None:
    from django.test import override_settings

    from jobq.contrib.django.checks import check_dashboard_urls

    client = signed_in(django_user_model, "io")
    before = check_dashboard_urls()
    with override_settings(ROOT_URLCONF="djproject.urls_admin_first"):
        shadowed = client.get("/admin/jobq/")
        (warning,) = check_dashboard_urls()

    assert before == []
    assert client.get("/admin/jobq/").status_code == 200  # before the admin's
    assert shadowed.status_code == 404  # the admin's catch-all answered
    assert warning.id == "jobq.W001"
    assert "the jobq dashboard at /admin/jobq/ is never reached" in warning.msg
    assert "AdminSite.catch_all_view" in warning.msg
    assert warning.hint.startswith(
        'Put path("admin/jobq/", include("jobq.contrib.django.urls")) before '
        'path("admin/", admin.site.urls)'
    )
