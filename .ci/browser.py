"""Opens tokentrace's HTML reports in headless Chromium, offline, and checks them.

usage: browser.py SHOTS_DIR PAGE.html:SCORING.json|COMPARISON.html:- ...

For each page, from a file URL with every network request refused:
- the console has no errors, and the page made no request beyond its own file;
- the served model's name is shown as text, whatever it holds, the page has its own six
  script elements only, and its embedded JSON parses;
- the decode matrix has one cell per decode cell of the JSON scoring, with its verdict,
  total tok/s and median TTFT equal to the scoring's;
- every chart (prefill by context; total tok/s, per-request tok/s and TTFT against
  concurrency) is drawn;
- clicking each matrix cell opens its drill-down, with a drawn token chart and
  request lanes (the first drill-down of each verdict is saved as
  PAGE-drill-VERDICT.png);
- the Burst / E2E table has a row per burst cell, each context's Request rate table a
  row per rate cell, and each latency-versus-rate curve (an inline SVG) is drawn;
- clicking a column of the measurements table sorts it;
- a screenshot of the whole page is saved in SHOTS_DIR.
A comparison page (`:-`) must show its ratio heat map: every cell both runs have, with
a tok/s ratio, drawn. Exits non-zero with what failed. Driven by Selenium with the system's chromedriver.
"""

import json
import math
import pathlib
import sys

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By


def browser():
    opts = webdriver.ChromeOptions()
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--window-size=1280,1600",
        # No network: every host resolves nowhere, and any proxy use fails.
        "--host-resolver-rules=MAP * ~NOTFOUND",
        "--proxy-server=http://127.0.0.1:9",
        "--allow-file-access-from-files",
    ):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(options=opts, service=Service("/usr/bin/chromedriver"))


def same(a, b):
    if a is None or b is None:
        return a is None and b is None
    return math.isclose(a, b, rel_tol=1e-12, abs_tol=0.0)


def number(text):
    return float(text) if text not in (None, "") else None


def offline(driver, page):
    """Opens the page; the console errors and network requests it made."""
    driver.get(page.resolve().as_uri())
    problems = []
    errors = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
    if errors:
        problems.append(f"console errors: {errors}")
    requests = driver.execute_script(
        "return performance.getEntriesByType('resource').map(function(e){return e.name})"
    )
    if requests:
        problems.append(f"network requests: {requests}")
    return problems


def screenshot(driver, shots, name):
    height = driver.execute_script("return document.body.scrollHeight")
    driver.set_window_size(1280, max(800, min(int(height) + 40, 8000)))
    shot = shots / (name + ".png")
    driver.save_screenshot(str(shot))
    driver.set_window_size(1280, 1600)
    return shot


def check_comparison(driver, page, shots):
    problems = offline(driver, page)
    cells = driver.find_elements(By.CSS_SELECTOR, "table.ratio td.ratio")
    if not cells:
        problems.append("no ratio heat map cells")
    for td in cells:
        name = f'{td.get_attribute("data-context")} x {td.get_attribute("data-concurrency")}'
        if not td.is_displayed() or "tok/s" not in td.text:
            problems.append(f"{name}: ratio not shown ({td.text!r})")
    return problems, screenshot(driver, shots, page.stem)


def check(driver, page, scoring, shots):
    problems = offline(driver, page)

    # Text is shown as text: the served model's name, whatever it holds (`<!--<script>`,
    # `</script>`, `]]>`), is the text of its fact, and the page's elements are the
    # page's own (no script or comment opened by a name or an answer).
    served = driver.execute_script(
        "var d=[].slice.call(document.querySelectorAll('dl.facts dt'))"
        ".filter(function(t){return t.textContent==='Served model'})[0];"
        "return d?d.nextElementSibling.textContent:null"
    )
    if served != scoring["run"]["model"]:
        problems.append(f"served model shown as {served!r}, the scoring's is {scoring['run']['model']!r}")
    scripts = driver.execute_script("return document.scripts.length")
    if scripts != 6:
        problems.append(f"{scripts} script elements, the page has 6")
    for id in ("chart-data", "cell-data"):
        ok = driver.execute_script(
            f"try{{JSON.parse(document.getElementById('{id}').textContent);return true}}catch(e){{return false}}"
        )
        if not ok:
            problems.append(f"#{id} is not JSON")

    cells = [c for c in scoring["cells"] if c["phase"] == "decode"]
    shown = driver.find_elements(By.CSS_SELECTOR, "#matrix td.cell")
    if len(shown) != len(cells):
        problems.append(f"matrix has {len(shown)} cells, the scoring {len(cells)}")
    for c in cells:
        sel = f'#matrix td[data-context="{c["context"]}"][data-concurrency="{c["concurrency"]}"]'
        found = driver.find_elements(By.CSS_SELECTOR, sel)
        name = f'{c["context"]} x {c["concurrency"]}'
        if len(found) != 1:
            problems.append(f"{name}: {len(found)} matrix cells")
            continue
        td = found[0]
        if td.get_attribute("data-verdict") != (c["verdict"] or ""):
            problems.append(f"{name}: verdict {td.get_attribute('data-verdict')}")
        figures = c.get("figures") or {}
        shows = c["verdict"] in ("valid", "requests_queued")
        want_rate = figures.get("total_tok_s") if shows else None
        want_ttft = (figures.get("ttft_ms") or {}).get("median") if shows else None
        if not same(number(td.get_attribute("data-total-tok-s")), want_rate):
            problems.append(f"{name}: total tok/s {td.get_attribute('data-total-tok-s')} vs {want_rate}")
        if not same(number(td.get_attribute("data-ttft-ms")), want_ttft):
            problems.append(f"{name}: TTFT {td.get_attribute('data-ttft-ms')} vs {want_ttft}")
        if not td.is_displayed() or not td.text.strip():
            problems.append(f"{name}: not shown")

    # Charts: every chart box holds a uPlot canvas with something drawn on it.
    boxes = driver.find_elements(By.CSS_SELECTOR, ".charts:not(.drill) > div")
    drawn = driver.execute_script(
        "return Array.prototype.map.call(document.querySelectorAll('.charts:not(.drill) > div'),function(b){"
        "var c=b.querySelector('canvas');if(!c)return 0;"
        "var d=c.getContext('2d').getImageData(0,0,c.width,c.height).data,n=0;"
        "for(var i=3;i<d.length;i+=4){if(d[i]>0)n++}return n})"
    )
    want_charts = (3 if cells else 0) + (2 if any(c["phase"] == "prefill" for c in scoring["cells"]) else 0)
    if len(boxes) != want_charts or any(n < 200 for n in drawn):
        problems.append(f"charts: {len(boxes)} boxes (want {want_charts}), drawn pixels {drawn}")

    # Drill-down: clicking each matrix cell opens its section, with its title and a
    # drawn token chart; the first drill-down of each verdict is saved as a screenshot.
    shot_verdicts = set()
    for td in driver.find_elements(By.CSS_SELECTOR, "#matrix td.cell"):
        name = f'{td.get_attribute("data-context")} x {td.get_attribute("data-concurrency")}'
        driver.execute_script("arguments[0].scrollIntoView()", td)
        td.click()
        opened = driver.execute_script(
            "var s=document.getElementById('drill');if(!s||s.hidden)return null;"
            "function drawn(id){var c=document.querySelector(id+' canvas');if(!c)return 0;"
            "var d=c.getContext('2d').getImageData(0,0,c.width,c.height).data,n=0;"
            "for(var i=3;i<d.length;i+=4){if(d[i]>0)n++}return n}"
            "return [s.querySelector('h2').textContent,drawn('#drill-tokens'),drawn('#drill-lanes')]"
        )
        if not opened or min(opened[1:]) < 200 or name.split(" x ")[1] not in opened[0]:
            problems.append(f"{name}: drill-down {opened}")
        verdict = td.get_attribute("data-verdict") or "none"
        if verdict not in shot_verdicts:
            shot_verdicts.add(verdict)
            driver.execute_script("document.getElementById('drill').scrollIntoView()")
            driver.save_screenshot(str(shots / f"{page.stem}-drill-{verdict}.png"))

    # Burst and rate cells: their tables, and each context's curve drawn.
    burst = [c for c in scoring["cells"] if c["phase"] == "burst"]
    rows = driver.find_elements(By.CSS_SELECTOR, "#burst tbody tr")
    if len(rows) != len(burst):
        problems.append(f"burst table has {len(rows)} rows, the scoring {len(burst)} burst cells")
    rate = [c for c in scoring["cells"] if c["phase"] == "rate"]
    curves_wanted = 0
    for ctx in sorted({c["context"] for c in rate}):
        cells_here = [c for c in rate if c["context"] == ctx]
        rows = driver.find_elements(By.CSS_SELECTOR, f"#rate-{ctx} tbody tr")
        if len(rows) != len(cells_here) or not all(r.is_displayed() for r in rows):
            problems.append(f"rate table {ctx}: {len(rows)} rows, the scoring {len(cells_here)} cells")
        shown_cells = [c for c in cells_here if c["verdict"] in ("valid", "requests_queued")]
        curves_wanted += len(shown_cells) >= 2
    curves = driver.find_elements(By.CSS_SELECTOR, "svg.rate-curve")
    if len(curves) != curves_wanted:
        problems.append(f"rate curves: {len(curves)} drawn, want {curves_wanted}")
    for svg in curves:
        lines = [p.get_attribute("points").split() for p in svg.find_elements(By.TAG_NAME, "polyline")]
        size = svg.size
        if not svg.is_displayed() or size["width"] < 100 or size["height"] < 100 or not lines or any(len(l) < 2 for l in lines):
            problems.append(f"rate curve {svg.get_attribute('aria-label')}: not drawn ({size}, {lines})")

    # Sorting: the "Requests at once" column, clicked twice, ends descending (a rate
    # cell's row has no number there).
    header = driver.find_elements(By.CSS_SELECTOR, "#measurements thead th")[2]
    header.click()
    header.click()
    column = [
        float(v)
        for v in (
            td.get_attribute("data-sort")
            for td in driver.find_elements(By.CSS_SELECTOR, "#measurements tbody tr td:nth-child(3)")
        )
        if v is not None
    ]
    if column != sorted(column, reverse=True) or header.get_attribute("aria-sort") != "descending":
        problems.append(f"measurements not sorted descending by concurrency: {column}")

    return problems, screenshot(driver, shots, page.stem)


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    shots = pathlib.Path(sys.argv[1])
    shots.mkdir(parents=True, exist_ok=True)
    driver = browser()
    failed = False
    try:
        for arg in sys.argv[2:]:
            page, scoring = arg.split(":", 1)
            page = pathlib.Path(page)
            if scoring == "-":
                problems, shot = check_comparison(driver, page, shots)
            else:
                problems, shot = check(driver, page, json.loads(pathlib.Path(scoring).read_text()), shots)
            for p in problems:
                print(f"browser: {page.name}: {p}", file=sys.stderr)
            failed |= bool(problems)
            print(f"ok: {page.name}" if not problems else f"FAILED: {page.name}", f"(screenshot {shot})")
    finally:
        driver.quit()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
