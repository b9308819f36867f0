"""The Profiler app in real headless Chromium (selenium): an admin creates two teams and their users
on the admin page; each user signs in and sees only their team's runs, opens one on the HTML report,
and gets 404 for the other team's run by URL; the admin removes a user, whose open session and API
token stop working at once; the admin's landing page lists the corrupt run with its reason; a run
uploaded by a live zero-code job at its exit appears and opens."""

from __future__ import annotations

import pytest

from app_support import AppServer, cli, copy_store, live_job, shared_runs, wait_until  # noqa: F401 (a fixture)

webdriver = pytest.importorskip("selenium.webdriver")
from chromium import chromium  # noqa: E402
requests = pytest.importorskip("requests")
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select  # noqa: E402

PASSWORDS = {"root": "root password 1", "alice": "alice password 1", "bob": "bob password 1"}


@pytest.fixture(scope="module")
def browser():
    with chromium("otel-app-chromium-") as driver:
        driver.set_page_load_timeout(120)
        yield driver


@pytest.fixture(scope="module")
def server(shared_runs, tmp_path_factory):
    store = copy_store(shared_runs[0], tmp_path_factory.mktemp("app-browser"))
    cli("teams", "add", "ops", "--store", str(store))
    cli("users", "add", "root", "--team", "ops", "--role", "admin", "--store", str(store), stdin=PASSWORDS["root"])
    app = AppServer(store)
    app.store = store
    yield app
    app.stop()


def _page_gone(exc: WebDriverException) -> bool:
    """Whether ``exc`` says an element's page was replaced. Chromium says it as a stale element, or,
    when the old document goes while it is being asked (a busy machine), as an inspector error: "Node
    with given id does not belong to the document"."""
    return isinstance(exc, StaleElementReferenceException) or "does not belong to the document" in (exc.msg or "")


def click_to_new_page(driver, element, ready, what: str):
    """Click ``element`` (a link or a form's button) and wait for the page it leads to: the current
    page gone (its root element stale), the new one loaded, and ``ready()`` true on it; returns
    ``ready()``'s value. A click returns before the navigation it starts is done, sooner or later
    depending on the machine's load, so a read right after it can still see the old page (whose
    flash message or links then answer for the new one)."""
    old = driver.find_element(By.TAG_NAME, "html")
    element.click()

    def arrived():
        try:
            old.is_enabled()
            return None  # still the old page
        except WebDriverException as exc:
            if not _page_gone(exc):
                raise
        try:
            if driver.execute_script("return document.readyState") != "complete":
                return None
            return ready()
        except WebDriverException as exc:  # yet another page came meanwhile (a redirect)
            if not _page_gone(exc):
                raise
            return None
    return wait_until(arrived, what)


def sign_in(driver, server, name: str) -> None:
    driver.delete_all_cookies()
    driver.get(server.url + "/")
    wait_until(lambda: driver.find_elements(By.ID, "login"), "the sign-in form")
    driver.find_element(By.ID, "name").send_keys(name)
    driver.find_element(By.ID, "password").send_keys(PASSWORDS[name])
    click_to_new_page(driver, driver.find_element(By.ID, "sign-in"),
                      lambda: (who := driver.find_elements(By.ID, "who")) and name in who[0].text, f"{name} signed in")


def admin_form(driver, form_id: str, **fields: str) -> None:
    """Fill and submit a form of the admin page; waits for the admin page that answers it (the
    page before it may show the previous form's outcome)."""
    form = driver.find_element(By.ID, form_id)
    for name, value in fields.items():
        field = form.find_element(By.NAME, name)
        if field.tag_name == "select":
            Select(field).select_by_visible_text(value)
        else:
            field.send_keys(value)
    click_to_new_page(driver, form.find_element(By.TAG_NAME, "button"),
                      lambda: driver.find_elements(By.CSS_SELECTOR, ".flash.done, .flash.error"), "the outcome")
    errors = driver.find_elements(By.CSS_SELECTOR, ".flash.error")
    assert not errors, errors[0].text


def listed_runs(driver, server) -> list[str]:
    """The run ids on the landing page, once the store scan has listed any."""
    def rows():
        driver.get(server.url + "/")
        return [r.get_attribute("data-run") for r in driver.find_elements(By.CSS_SELECTOR, "#runs tr[data-run]")]
    return wait_until(rows, "runs on the landing page")


def test_admin_grants_teams_and_users_who_see_only_their_teams_runs(browser, server):
    sign_in(browser, server, "root")
    browser.get(server.url + "/admin")
    admin_form(browser, "team-add", name="vision")
    admin_form(browser, "team-add", name="nlp")
    admin_form(browser, "user-add", name="alice", team="vision", role="member", password=PASSWORDS["alice"])
    admin_form(browser, "user-add", name="bob", team="nlp", role="viewer", password=PASSWORDS["bob"])
    users = {r.get_attribute("data-user"): r.text for r in browser.find_elements(By.CSS_SELECTOR, "#users tr[data-user]")}
    assert "vision" in users["alice"] and "member" in users["alice"] and "nlp" in users["bob"]
    audit = browser.find_element(By.ID, "audit").text
    assert "user.grant alice team=vision role=member" in audit and "team.add nlp" in audit

    assert sorted(wait_until(lambda: r if len(r := listed_runs(browser, server)) == 3 else None, "3 runs")) == \
        ["broken-run", "nlp-run", "vision-run"]
    broken = browser.find_element(By.CSS_SELECTOR, 'tr[data-run="broken-run"]')
    assert "corrupt" in broken.text and "not valid JSON" in broken.text

    for name, mine, other in (("alice", "vision-run", "nlp-run"), ("bob", "nlp-run", "vision-run")):
        sign_in(browser, server, name)
        assert listed_runs(browser, server) == [mine]
        click_to_new_page(browser, browser.find_element(By.LINK_TEXT, mine),
                          lambda: browser.find_elements(By.ID, "tl-canvas"), f"{mine}'s report")
        assert browser.find_elements(By.ID, "dashboard") and browser.find_elements(By.ID, "insights")
        browser.get(f"{server.url}/runs/{other}")
        assert "Not Found" in browser.page_source and not browser.find_elements(By.ID, "tl-canvas")
        browser.get(f"{server.url}/")
        form = browser.find_element(By.ID, "compare")
        form.find_element(By.NAME, "base").send_keys(mine)
        form.find_element(By.NAME, "new").send_keys(mine)
        # The comparison page by its own elements: the landing page has "Steps" and the run id too.
        header = click_to_new_page(browser, form.find_element(By.TAG_NAME, "button"),
                                   lambda: browser.find_elements(By.ID, "diff-data") and
                                   browser.find_element(By.TAG_NAME, "header").text, "the comparison page")
        assert f"base: {mine}" in header and f"new: {mine}" in header and "Step" in browser.page_source
        browser.get(f"{server.url}/diff?base={mine}&new={other}")
        assert "Not Found" in browser.page_source
        browser.get(f"{server.url}/admin")
        assert "Forbidden" in browser.page_source


def test_a_run_uploaded_by_a_live_job_appears_on_the_landing_page_and_opens(browser, server, tmp_path):
    """A live zero-code job with OTEL_PROFILER_UPLOAD: its run arrives after its exit, and opens."""
    token = cli("users", "token", "alice", "--store", str(server.store)).stdout.strip()
    out = tmp_path / "out"
    out.mkdir()
    job = live_job(out, "vision", "alice", {"OTEL_PROFILER_UPLOAD": server.url, "OTEL_PROFILER_UPLOAD_TOKEN": token},
                   profile_dir=out / "vision-uploaded")
    assert job.returncode == 0, job.stderr[-2000:]
    sign_in(browser, server, "alice")
    assert sorted(wait_until(lambda: r if len(r := listed_runs(browser, server)) == 2 else None, "the upload")) == \
        ["vision-run", "vision-uploaded"]
    click_to_new_page(browser, browser.find_element(By.LINK_TEXT, "vision-uploaded"),
                      lambda: browser.find_elements(By.ID, "tl-canvas"), "the uploaded run's report")


def test_a_removed_users_session_and_token_stop_at_once(browser, server):
    sign_in(browser, server, "bob")
    assert listed_runs(browser, server) == ["nlp-run"]
    bob_cookies = browser.get_cookies()
    token = cli("users", "token", "bob", "--store", str(server.store)).stdout.strip()
    answer = requests.get(server.url + "/api/runs", headers={"Authorization": f"Bearer {token}"}, timeout=60)
    assert [r["run_id"] for r in answer.json()["runs"]] == ["nlp-run"]

    sign_in(browser, server, "root")
    browser.get(server.url + "/admin")
    row = browser.find_element(By.CSS_SELECTOR, 'tr[data-user="bob"]')
    click_to_new_page(browser, row.find_element(By.CSS_SELECTOR, "button.remove"),
                      lambda: browser.find_elements(By.CSS_SELECTOR, ".flash.done"), "the removal")
    assert not browser.find_elements(By.CSS_SELECTOR, 'tr[data-user="bob"]')
    assert "user.remove bob" in browser.find_element(By.ID, "audit").text

    browser.delete_all_cookies()
    for cookie in bob_cookies:
        browser.add_cookie({k: cookie[k] for k in ("name", "value", "path") if k in cookie})
    browser.get(f"{server.url}/runs/nlp-run")
    assert browser.find_elements(By.ID, "login") and not browser.find_elements(By.ID, "tl-canvas")
    answer = requests.get(server.url + "/api/runs", headers={"Authorization": f"Bearer {token}"}, timeout=60)
    assert answer.status_code == 401
