"""The pages in a real browser: Debian's chromium (installed by scripts/setup.sh) driven headless through
playwright. The runs list shows the runs; the run page shows the phase, a loss chart with one point per
step, the clients table; a new witness on chain appears on the open page without a reload; run names and
descriptions that are HTML/JS payloads render as text and run nothing. Screenshots are saved under
build/test-artifacts/explorer/."""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path

import pytest
from support.scripted_run import convict_by_checks, start_epoch, submit_witnesses

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[2] / "build" / "test-artifacts" / "explorer"
XSS_NAME = '<img src=x onerror="window.__xss=1">'
XSS_DESCRIPTION = '</p><script>window.__xss=2</script><a href="javascript:window.__xss=3">x</a>'


def _browser_or_skip():
    try:
        from playwright.async_api import async_playwright
    except ImportError as e:  # pragma: no cover - the test extra installs it
        pytest.skip(
            f"!!! BROWSER TEST SKIPPED: playwright is not installed ({e}); run scripts/setup.sh"
        )
    if not Path(CHROMIUM).exists():
        pytest.skip("!!! BROWSER TEST SKIPPED: no chromium at /usr/bin/chromium; scripts/setup.sh "
                    "installs Debian's chromium (apt-get install chromium)")  # fmt: skip
    return async_playwright


async def test_pages_in_a_real_browser(chain, tmp_path):
    async_playwright = _browser_or_skip()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    await chain.create_run("watched")
    await chain.create_run("hostile", name=XSS_NAME, description=XSS_DESCRIPTION)
    members = await chain.members()
    await chain.play("watched", members)
    run = await start_epoch(
        chain.client, "watched", members
    )  # epoch 1, first round: clients listed

    async with (
        chain.explorer(tmp_path / "x.sqlite", poll_interval=1.0) as ex,
        async_playwright() as pw,
    ):  # fmt: skip
        await chain.caught_up(ex, 2)
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            # bypass_csp: the payloads must stay inert through escaping alone, without the server's CSP
            # (whose header test_api checks); it also lets playwright evaluate its wait predicates
            context = await browser.new_context(
                viewport={"width": 1280, "height": 1000}, bypass_csp=True
            )
            page = await context.new_page()
            dialogs: list[str] = []
            page.on(
                "dialog", lambda d: (dialogs.append(d.message), asyncio.ensure_future(d.dismiss()))
            )
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))

            # the runs list
            await page.goto(ex.url + "/")
            await page.wait_for_selector("body[data-loaded]")
            rows = page.locator("#runs tbody tr")
            assert await rows.count() == 2
            text = await page.locator("#runs").inner_text()
            assert "KJV Llama 20M" in text and "RoundTrain" in text and XSS_NAME in text
            await page.screenshot(path=str(ARTIFACTS / "runs.png"), full_page=True)
            await page.click("#runs th[data-key=step]")  # sortable
            assert await page.locator("#runs th.asc").count() == 1

            # the run page
            await page.goto(ex.url + "/runs/watched")
            await page.wait_for_selector("body[data-loaded]")
            assert (await page.locator("#phase").inner_text()).startswith("RoundTrain")
            assert await page.locator("#loss-chart").get_attribute("data-points") == "2"
            assert await page.locator("#clients tbody tr").count() == 3
            roles = await page.locator("#clients tbody tr td:last-child").all_inner_texts()
            assert sum(r.startswith("witness") for r in roles) == 3  # three seats, three clients
            assert await page.locator("#transactions tbody tr").count() > 0
            href = await page.locator("#transactions a").first.get_attribute("href")
            assert href.startswith("https://explorer.solana.com/tx/") and "cluster=custom" in href
            await page.screenshot(path=str(ARTIFACTS / "run.png"), full_page=True)

            # live: a witness lands on chain; the open page shows it without a reload
            await page.evaluate("window.__same_page = true")
            started = time.monotonic()
            await submit_witnesses(chain.client, run, members, chain.metrics)
            await page.wait_for_function(
                "document.getElementById('loss-chart').dataset.points === '3'", timeout=10_000
            )
            live_seconds = time.monotonic() - started
            assert await page.evaluate("window.__same_page === true"), "the page was reloaded"
            assert (await page.locator("#rounds tbody tr").first.inner_text()).startswith("3")
            await page.screenshot(path=str(ARTIFACTS / "run-live.png"), full_page=True)
            await page.screenshot(path=str(ARTIFACTS / "run-top.png"))  # the README's picture
            assert live_seconds < 10

            # hostile strings are text
            await page.goto(ex.url + "/runs/hostile")
            await page.wait_for_selector("body[data-loaded]")
            assert await page.locator("#name").inner_text() == XSS_NAME
            assert await page.locator("#description").inner_text() == XSS_DESCRIPTION
            assert await page.locator("#name img, #description script, #description a").count() == 0
            await page.screenshot(path=str(ARTIFACTS / "hostile.png"), full_page=True)
            await page.goto(ex.url + "/")
            await page.wait_for_selector("body[data-loaded]")
            assert await page.locator("#runs img").count() == 0
            assert await page.evaluate("window.__xss === undefined")
            assert dialogs == [] and errors == []
        finally:
            await browser.close()


async def test_the_run_page_shows_a_members_checks_disputes_and_conviction(chain, tmp_path):
    """A trainer's check fails, its dispute convicts it: the run page's checks section shows that member's
    history (two failed checks, the dispute's outcome, the conviction's reason) and its ban; a run with none
    shows no such section."""
    async_playwright = _browser_or_skip()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    await chain.create_run("checked", config={"verification_percent": 100})
    await chain.create_run("quiet")
    members = await chain.members()
    await start_epoch(chain.client, "checked", members)
    facts = await convict_by_checks(chain.client, "checked", members)
    wallet = str(facts["wallets"][facts["trainer"]].pubkey())
    async with (
        chain.explorer(tmp_path / "x.sqlite", poll_interval=1.0) as ex,
        async_playwright() as pw,
    ):  # fmt: skip
        await chain.caught_up(ex, 2)
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = await (
                await browser.new_context(viewport={"width": 1280, "height": 1000})
            ).new_page()
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            await page.goto(ex.url + "/runs/checked")
            await page.wait_for_selector("body[data-loaded]")
            assert await page.locator("#checks").is_visible()
            row = page.locator("#check-members tbody tr")
            assert await row.count() == 1 and await row.get_attribute("data-wallet") == wallet
            step = facts["step"]
            assert await row.locator(".failed-checks").inner_text() == (
                f"s{step} PayloadMismatch by {short(facts, 0)} (1), "
                f"s{step} StateNotDelivered by {short(facts, 1)} (2)"
            )
            assert (
                await row.locator(".disputes").inner_text()
                == f"s{step} Convicted (2 fail, 0 pass of 2)"
            )
            assert (await row.locator(".convictions").inner_text()).startswith(
                f"FailedVerification at s{step}"
            )
            assert await row.locator(".now").inner_text() == "convicted; banned until epoch 5"
            summary = await page.locator("#checks-summary").inner_text()
            assert summary.startswith("2 failed check reports, 1 disputes opened, 1 convictions")
            await page.screenshot(path=str(ARTIFACTS / "run-checks.png"), full_page=True)
            await page.goto(ex.url + "/runs/quiet")
            await page.wait_for_selector("body[data-loaded]")
            assert await page.locator("#checks").is_hidden()
            assert errors == []
        finally:
            await browser.close()


def short(facts: dict, k: int) -> str:
    """The page's short form of the k-th verifier's wallet (6 characters, …, 6 characters)."""
    wallet = str(facts["wallets"][facts["verifiers"][k]].pubkey())
    return wallet[:6] + "…" + wallet[-6:]
