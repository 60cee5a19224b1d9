#!/usr/bin/env python3
"""The dashboard (`/ui` on `ctxd serve`) in a real headless browser: Debian's Chromium driven
through chromedriver by Selenium.

Two gateways, each in front of the strict `ctxd-mock`:
- on loopback, over a store holding every session of ../shared/sessions (`ctxd import`): the
  sessions page loads with no console error, sorts and filters; a request sent through the
  gateway appears on the open page within 2 s; a session page draws its chart (elements of
  plausible size, a screenshot that is not blank), searches history and opens an item's raw
  content; the report's numbers on the page are `ctxd report --json`'s;
- beyond loopback (0.0.0.0), two tenants: the page asks for a key, and the second tenant's key
  shows none of the first tenant's sessions (in the page and in its JSON answers).

Usage: python3 tests/ui/run.py --ctxd target/release/ctxd --mock target/release/ctxd-mock
       [--screenshots docs/] [--keep]
Prints 'ui: N passed, M failed' and exits non-zero on any failure.
"""

import argparse
import glob
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import zlib

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.environ.get("CTXD_SHARED") or os.path.join(HERE, "..", "..", "..", "shared")
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver")

results = []


def check(name, ok, detail=""):
    results.append((name, bool(ok)))
    print(f"{'ok  ' if ok else 'FAIL'} {name}" + (f": {detail}" if detail and not ok else ""),
          flush=True)
    return ok


class Child:
    """A child process whose output line matching `announce` gives its address."""

    def __init__(self, argv, log_path, announce, stream="stdout", env=None):
        self.log = open(log_path, "wb")
        out = {"stdout": subprocess.PIPE, "stderr": self.log}
        if stream == "stderr":
            out = {"stdout": self.log, "stderr": subprocess.PIPE}
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, env=env, **out)
        pipe = self.proc.stdout if stream == "stdout" else self.proc.stderr
        pattern = re.compile(announce)
        found = {}

        def read():
            for line in pipe:
                self.log.write(line)
                self.log.flush()
                m = pattern.search(line.decode("utf-8", "replace"))
                if m and "addr" not in found:
                    found["addr"] = m.group(1)
            self.log.flush()

        threading.Thread(target=read, daemon=True).start()
        deadline = time.time() + 30
        while "addr" not in found and time.time() < deadline and self.proc.poll() is None:
            time.sleep(0.05)
        if "addr" not in found:
            self.stop()
            raise RuntimeError(f"{argv[0]} did not start (see {log_path})")
        self.address = found["addr"]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def serve(ctxd, store, mock_url, listen, workdir, name, extra=(), env=None):
    child = Child(
        [ctxd, "--store", store, "serve", "--listen", listen, "--upstream-anthropic", mock_url,
         "--upstream-openai", mock_url, "--upstream-gemini", mock_url, *extra],
        os.path.join(workdir, name + ".log"),
        r"ctxd serve: listening on http://(\S+)",
        env=env,
    )
    port = int(child.address.rsplit(":", 1)[1])
    return child, f"http://127.0.0.1:{port}"


def send(base, key, session, text):
    """One Messages request through the gateway (to the strict mock)."""
    body = json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 20,
                       "messages": [{"role": "user", "content": text}]}).encode()
    req = urllib.request.Request(base + "/v1/messages", data=body, method="POST", headers={
        "content-type": "application/json", "x-api-key": key, "x-ctxd-session": session,
        "anthropic-version": "2023-06-01"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.status, json.load(r)


def get_json(url, headers=None):
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def browser():
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    profile = tempfile.mkdtemp(prefix="ctxd-ui-chrome.")
    for flag in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
                 "--window-size=1440,1000", "--hide-scrollbars", f"--user-data-dir={profile}"]:
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    driver.set_page_load_timeout(30)
    driver._ctxd_profile = profile
    return driver


def shown_rows(driver):
    return driver.find_elements(By.CSS_SELECTOR, "#sessions tbody tr[data-id]")


def console_errors(driver):
    return [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


def wait(driver, pred, timeout=10):
    return WebDriverWait(driver, timeout, poll_frequency=0.05).until(lambda d: pred(d))


def png_pixels(data):
    """(width, height, rows of RGB(A) bytes) of a non-interlaced 8-bit PNG (what Chrome writes)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height, channels = 8, b"", 0, 0, 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind = data[pos + 4:pos + 8]
        chunk = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", chunk[:10])
            assert depth == 8 and color in (2, 6), (depth, color)
            channels = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * channels
    rows, prev = [], bytearray(stride)
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b = prev[i]
            c = prev[i - channels] if i >= channels else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pred) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, channels, rows


def not_blank(png):
    """Share of pixels unlike the most common colour, and how many colours there are."""
    w, h, ch, rows = png_pixels(png)
    counts = {}
    for row in rows[::2]:
        for x in range(0, w * ch, ch * 2):
            px = row[x:x + 3]
            counts[px] = counts.get(px, 0) + 1
    total = sum(counts.values())
    background = max(counts.values())
    return (total - background) / total, len(counts)


def loopback_checks(args, workdir, mock_url, driver):
    store = os.path.join(workdir, "shared.db")
    files = sorted(f for f in glob.glob(os.path.join(SHARED, "sessions", "**", "*"), recursive=True)
                   if os.path.isfile(f) and not f.endswith(".md"))
    # One import per file: a format ctxd does not read yet (Gemini CLI's JSONL) is left out,
    # any other failure fails the run.
    imported = []
    for f in files:
        r = subprocess.run([args.ctxd, "--store", store, "import", f],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if r.returncode == 0:
            imported.append(f)
        elif "not a session file ctxd knows" not in r.stderr:
            raise subprocess.CalledProcessError(r.returncode, r.args, stderr=r.stderr)
    files = imported
    gw, base = serve(args.ctxd, store, mock_url, "127.0.0.1:0", workdir, "gateway-loopback")
    try:
        t = time.time()
        driver.get(base + "/ui/")
        wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#sessions tbody tr[data-id]"))
        rows = driver.find_elements(By.CSS_SELECTOR, "#sessions tbody tr[data-id]")
        _, listing = get_json(base + "/ui/api/sessions")
        total = listing["total"]
        check("sessions page lists every imported session",
              len(rows) == total and total >= len(files), f"{len(rows)} rows, {total} stored, {len(files)} files")
        # Rows summarised within the first polls (no 'reading the log' left).
        wait(driver, lambda d: not d.find_elements(By.CSS_SELECTOR, "#sessions td.pending"), 15)
        print(f"     sessions page complete in {time.time() - t:.2f} s", flush=True)
        check("sessions page: no console errors", not console_errors(driver),
              console_errors(driver))

        # Sorting by turns (descending, then ascending on a second click).
        def turns():
            cells = driver.find_elements(By.CSS_SELECTOR, "#sessions tbody tr[data-id] td:nth-child(7)")
            return [int(c.text.replace(",", "")) for c in cells]

        driver.find_element(By.CSS_SELECTOR, 'th[data-sort="turns"]').click()
        wait(driver, lambda d: "sort=turns" in d.current_url and turns() == sorted(turns(), reverse=True))
        check("sorts by turns, most first", turns() == sorted(turns(), reverse=True), turns())
        driver.find_element(By.CSS_SELECTOR, 'th[data-sort="turns"]').click()
        wait(driver, lambda d: "dir=asc" in d.current_url and turns() == sorted(turns()))
        check("a second click sorts the other way", turns() == sorted(turns()), turns())

        # Filtering.
        box = driver.find_element(By.ID, "filter")
        box.send_keys("codex")

        def shown():
            return driver.find_elements(By.CSS_SELECTOR, "#sessions tbody tr[data-id]")

        wait(driver, lambda d: 0 < len(shown()) < total)
        texts = [r.text.lower() for r in shown()]
        agents = [c.text for c in driver.find_elements(By.CSS_SELECTOR, "#sessions tbody tr[data-id] td:nth-child(2)")]
        check("filters (by agent, key, project, model)",
              "codex" in agents and 0 < len(texts) < total, texts)
        driver.get(base + "/ui/?sort=last_active&dir=desc")
        wait(driver, lambda d: len(shown()) == total)
        if args.screenshots:
            driver.save_screenshot(os.path.join(args.screenshots, "ui-sessions.png"))

        # The usage page: a row per day across the sessions, filtered by project.
        driver.get(base + "/ui/usage")
        wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#usage-days tbody tr"), 30)
        _, usage = get_json(base + "/ui/api/usage")
        days = driver.find_elements(By.CSS_SELECTOR, "#usage-days tbody tr")
        check("usage page: a row per day, the chart beside them",
              len(days) == len(usage["days"]) > 0 and driver.find_elements(By.ID, "usage-chart"),
              f"{len(days)} rows, {len(usage['days'])} days")
        project = usage["projects"][0] if usage["projects"] else None
        if check("usage page: projects to filter by", project, usage["projects"]):
            Select(driver.find_element(By.ID, "usage-project")).select_by_value(project)
            _, only = get_json(base + "/ui/api/usage?" + urllib.parse.urlencode({"project": project}))
            wait(driver, lambda d: "project=" in d.current_url and d.find_element(
                By.ID, "usage-sessions").text.startswith(f"{only['sessions']} session"), 30)
            shown = driver.find_elements(By.CSS_SELECTOR, "#usage-days tbody tr")
            check("usage page: filtered by project",
                  len(shown) == len(only["days"]) and only["sessions"] < usage["sessions"],
                  f"{len(shown)} rows, {only['sessions']} of {usage['sessions']} sessions")
        check("usage page: no console errors", not console_errors(driver), console_errors(driver))
        driver.get(base + "/ui/?sort=last_active&dir=desc")
        wait(driver, lambda d: len(shown_rows(d)) == total)

        # Live: a request through the gateway shows up on the open page.
        sent = time.time()
        status, _ = send(base, "sk-live", "live-ui-check", "hello from the browser test")
        answered = time.time()
        wait(driver, lambda d: "live-ui-check" in d.find_element(By.ID, "content").text, 5)
        seen = time.time()
        check("a request through the gateway appears on the open page within 2 s",
              status == 200 and seen - answered < 2.0,
              f"{seen - answered:.2f} s after its answer")
        print(f"     new session on the page {seen - answered:.2f} s after its answer "
              f"({seen - sent:.2f} s after sending)", flush=True)

        # The session page of the largest session.
        code, listing = get_json(base + "/ui/api/sessions?sort=turns&dir=desc")
        big = listing["sessions"][0]
        t = time.time()
        driver.get(f"{base}/ui/session/{big['id']}")
        chart = wait(driver, lambda d: d.find_element(By.ID, "context-chart"))
        print(f"     session page ({big['summary']['turns']} turns) drawn in {time.time() - t:.2f} s",
              flush=True)
        size = chart.size
        check("the chart is drawn at a plausible size", size["width"] > 600 and size["height"] > 200,
              size)
        lines = driver.find_elements(By.CSS_SELECTOR, "#context-chart polyline.series")
        points = [len((l.get_attribute("points") or "").split()) for l in lines]
        check("both series have a point per turn", points and all(p == big["summary"]["turns"] for p in points),
              f"{points} for {big['summary']['turns']} turns")
        line_box = driver.find_element(By.CSS_SELECTOR, "#context-chart polyline.upstream").rect
        check("the upstream line spans the chart", line_box["width"] > 500 and line_box["height"] > 20,
              line_box)
        blank, colours = not_blank(chart.screenshot_as_png)
        check("the chart's screenshot is not blank", blank > 0.005 and colours > 3,
              f"{blank:.3%} drawn, {colours} colours")
        rows = driver.find_elements(By.CSS_SELECTOR, "#composition tbody tr")
        check("the composition table has rows", len(rows) >= 4, len(rows))
        check("session page: no console errors", not console_errors(driver), console_errors(driver))

        # The numbers are `ctxd report --json`'s.
        out = subprocess.run([args.ctxd, "--store", store, "report", "--json", big["key"]],
                             check=True, capture_output=True, text=True).stdout
        report = json.loads(out.splitlines()[0])
        code, page = get_json(f"{base}/ui/api/session/{big['id']}")
        ours = page["report"]
        same = all(ours[k] == report[k] for k in ("headline", "composition", "turns", "billed"))
        check("the page's report is `ctxd report --json`'s", code == 200 and same)
        cards = driver.find_element(By.ID, "summary-cards").text
        tokens = report["headline"]["tokens"]
        check("the headline on the page is the report's",
              tokens is not None and f"{tokens:,}" in cards, cards)

        # History search, then an item's raw content through recall.
        search = driver.find_element(By.CSS_SELECTOR, "#search input[name=q]")
        search.send_keys("test")
        driver.find_element(By.CSS_SELECTOR, "#search button").click()
        wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#hits li") or
             d.find_elements(By.CSS_SELECTOR, "#hits .empty"))
        hits = driver.find_elements(By.CSS_SELECTOR, "#hits li")
        check("history search finds items", len(hits) > 0, len(hits))
        if hits:
            hits[0].find_element(By.CSS_SELECTOR, "button.raw").click()
            wait(driver, lambda d: d.find_element(By.ID, "raw-dialog").is_displayed() and
                 d.find_element(By.ID, "raw-text").text not in ("", "Loading…"))
            raw = driver.find_element(By.ID, "raw-text").text
            check("an item's raw content opens in one click", len(raw) > 20 and not raw.startswith("ctxd:"),
                  raw[:200])
            driver.find_element(By.ID, "raw-close").click()
        check("search and recall: no console errors", not console_errors(driver),
              console_errors(driver))
        if args.screenshots:
            driver.set_window_size(1440, 2000)
            driver.get(f"{base}/ui/session/{big['id']}")
            wait(driver, lambda d: d.find_element(By.ID, "context-chart"))
            driver.save_screenshot(os.path.join(args.screenshots, "ui-session.png"))
            driver.set_window_size(1440, 1000)
    finally:
        gw.stop()


def tenant_checks(args, workdir, mock_url, driver):
    store = os.path.join(workdir, "tenants.db")
    env = dict(os.environ, CTXD_UI_TEST_ADMIN="operator-secret-1")
    gw, base = serve(args.ctxd, store, mock_url, "0.0.0.0:0", workdir, "gateway-tenants",
                     ["--admin-token-env", "CTXD_UI_TEST_ADMIN"], env=env)
    try:
        send(base, "sk-tenant-one", "first-tenants-session", "one's own words")
        send(base, "sk-tenant-two", "second-tenants-session", "two's own words")
        driver.get(base + "/ui/")
        wait(driver, lambda d: d.find_element(By.ID, "login").is_displayed())
        check("beyond loopback the page asks for a key", True)
        driver.find_element(By.ID, "login-key").send_keys("sk-tenant-two")
        driver.find_element(By.CSS_SELECTOR, "#login button").click()
        wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#sessions tbody tr[data-id]"))
        time.sleep(1.5)  # a poll or two more: nothing else may appear
        text = driver.find_element(By.ID, "content").text
        check("the second tenant sees its own session", "second-tenants-session" in text, text)
        check("the second tenant sees none of the first's",
              "first-tenants-session" not in text and "first-tenants-session" not in driver.page_source)
        check("tenant page: no console errors", not console_errors(driver), console_errors(driver))
        code, listing = get_json(base + "/ui/api/sessions", {"x-api-key": "sk-tenant-two"})
        keys = [s["key"] for s in listing.get("sessions", [])]
        check("the second tenant's JSON lists only its session", keys == ["second-tenants-session"], keys)
        code, every = get_json(base + "/ui/api/sessions", {"x-ctxd-admin-token": "operator-secret-1"})
        check("the operator token sees both tenants", len(every.get("sessions", [])) == 2, every)
        one = next(s for s in every["sessions"] if s["key"] == "first-tenants-session")
        code, body = get_json(f"{base}/ui/api/session/{one['id']}", {"x-api-key": "sk-tenant-two"})
        check("the first tenant's session is not found by the second's key",
              code == 404 and "one's own" not in json.dumps(body), (code, body))
        code, _ = get_json(base + "/ui/api/sessions")
        check("no key, no sessions (401)", code == 401, code)
        driver.execute_script("sessionStorage.clear()")
    finally:
        gw.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ctxd", required=True)
    ap.add_argument("--mock", required=True)
    ap.add_argument("--screenshots", help="write ui-sessions.png and ui-session.png here")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args()
    args.ctxd = os.path.abspath(args.ctxd)
    workdir = tempfile.mkdtemp(prefix="ctxd-ui.")
    mock = Child([os.path.abspath(args.mock), "--port", "0"], os.path.join(workdir, "mock.log"),
                 r"listening on (http://\S+)", stream="stderr")
    driver = None
    try:
        driver = browser()
        for name, run in [("loopback", loopback_checks), ("tenants", tenant_checks)]:
            try:
                run(args, workdir, mock.address, driver)
            except Exception as e:  # one group failing still runs the other
                check(f"{name} checks ran to the end", False, f"{type(e).__name__}: {e}")
    finally:
        if driver:
            driver.quit()
            shutil.rmtree(driver._ctxd_profile, ignore_errors=True)
        mock.stop()
        if args.keep:
            print("work directory:", workdir)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    passed = sum(1 for _, ok in results if ok)
    failed = len(results) - passed
    print(f"ui: {passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
