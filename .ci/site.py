"""Checks a site built by `tokentrace site` in headless Chromium, offline.

usage: site.py SITE_DIR BIN SHOTS_DIR SOURCES...
  SITE_DIR  the site's folder; BIN  tokentrace; SHOTS_DIR  where screenshots go;
  SOURCES   the folders the site was built from (every run folder under them, one
            holding manifest.json, must be on the site)

Checks:
- every page (index, runs/*.html, groups/*.html) loads from a file URL with no console
  error, no request beyond the site's files (Chromium resolves no host), and no alert: the pages hold their own script elements only
  (index 2, group 1, run 6) and no comment node;
- every link (`a[href]`, and any `src`) is relative and names a file inside SITE_DIR
  (and an element of it, for a `#fragment`);
- the index lists every run of the state file once, with the state's texts (model,
  hardware, engine, version, group, figures' source) as text, and every group;
- sorting: "Peak decode tok/s" clicked sorts by data-sort ascending (no number last),
  again descending; "Model" sorts by text;
- filtering: each option of each filter shows exactly the rows whose data-* equals it,
  and says how many in #shown; "all" shows every row again;
- the hostile model name (hostile.py) is shown as text on the index, its group's page
  and its run's page, with the launch command and hardware text as text too;
- imported runs say "imported: llm-inference-bench ..." in "Figures from";
- each run page is `BIN report RUN --format html` byte for byte once its navigation bar
  is removed, and its JSON is `BIN report RUN --format json` (plain Python; skipped for
  a site built with --rules or --public, whose pages say so);
- screenshots of the index and the largest group's page are saved in SHOTS_DIR, as
  SITE-index.png and SITE-group.png (SITE: the name of SITE_DIR).
Exits non-zero with what failed.
"""

import html.parser
import json
import pathlib
import subprocess
import sys
import urllib.parse

from selenium.common.exceptions import NoAlertPresentException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.select import Select

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import browser  # noqa: E402  (.ci/browser.py: the Chromium setup and screenshots)

HOSTILE_MODEL = "org/<!--<script>alert(1)</script>]]>&amp;"
NAV_START = '<body>\n<nav class="site" '
NAV_END = "</nav>\n"
SCRIPTS = {"index": 2, "group": 1, "run": 6}

# Before any page's own script: alert, confirm and prompt only note that they were called.
NO_ALERTS = (
    "window.__alerts=[];['alert','confirm','prompt'].forEach(function(n){"
    "window[n]=function(m){window.__alerts.push(n+': '+String(m))}});"
)


class Problems(list):
    def add(self, where, what):
        self.append(f"{where}: {what}")


class Ids(html.parser.HTMLParser):
    """The ids (and a names) of a page, for links to a fragment."""

    def __init__(self):
        super().__init__()
        self.ids = set()

    def handle_starttag(self, tag, attrs):
        for k, v in attrs:
            if k == "id" or (tag == "a" and k == "name"):
                self.ids.add(v)


def ids_of(path, cache={}):
    if path not in cache:
        p = Ids()
        p.feed(path.read_text())
        cache[path] = p.ids
    return cache[path]


def run_folders(sources):
    found = []
    for s in sources:
        for m in sorted(pathlib.Path(s).rglob("manifest.json")):
            found.append(m.parent)
    return found


def strip_nav(page):
    """The run page without its navigation bar, or None when it has not exactly one,
    right after `<body>`."""
    if page.count('<nav class="site" ') != 1 or NAV_START not in page:
        return None
    at = page.index(NAV_START) + len("<body>\n")
    end = page.find(NAV_END, at)
    if end < 0:
        return None
    return page[:at] + page[end + len(NAV_END):]


def check_reports(site, bin, sources, state, problems):
    """Every run page is its run's report with the bar inserted; every run is on the site."""
    folders = run_folders(sources)
    reports = {}
    for f in folders:
        out = subprocess.run([bin, "report", str(f), "--format", "html"], capture_output=True)
        if out.returncode != 0:
            problems.add(f, f"`report --format html` exited {out.returncode}: {out.stderr.decode()}")
            continue
        reports.setdefault(out.stdout, []).append(f)
    matched = {}
    for slug, row in state.items():
        page = site / "runs" / f"{slug}.html"
        if not page.is_file():
            continue  # reported with the pages
        bare = strip_nav(page.read_bytes().decode())
        if bare is None:
            problems.add(page.name, 'no single `<nav class="site" ...>...</nav>` right after <body>')
            continue
        found = reports.get(bare.encode(), [])
        if len(found) != 1:
            problems.add(page.name, f"without its nav bar it equals {len(found)} reports of the fleet ({row['run_id']}), want 1")
            continue
        run = found[0]
        if run in matched:
            problems.add(page.name, f"is the report of {run}, as {matched[run]} is")
        matched[run] = page.name
        manifest = json.loads((run / "manifest.json").read_text())
        if manifest["run_id"] != row["run_id"]:
            problems.add(page.name, f"is the report of {run} ({manifest['run_id']}), its row says {row['run_id']}")
        want = subprocess.run([bin, "report", str(run), "--format", "json"], capture_output=True, check=True).stdout
        got = (site / "runs" / f"{slug}.json").read_bytes()
        if got != want:
            problems.add(f"{slug}.json", f"differs from `report {run} --format json`")
    for f in folders:
        if f not in matched:
            problems.add(f, "has no page on the site")
    return matched


def load(driver, site, page, kind, problems):
    """Opens `page`; checks the console, requests, alerts, script and comment nodes."""
    driver.get(page.resolve().as_uri())
    errors = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
    if errors:
        problems.add(page.name, f"console errors: {errors}")
    requests = driver.execute_script(
        "return performance.getEntriesByType('resource').map(function(e){return e.name})"
    )
    for r in requests:
        url = urllib.parse.urlsplit(r)
        if url.scheme != "file" or not pathlib.Path(urllib.parse.unquote(url.path)).resolve().is_relative_to(site.resolve()):
            problems.add(page.name, f"a request beyond the site's files: {r}")
    try:
        alert = driver.switch_to.alert
        problems.add(page.name, f"an alert is open: {alert.text!r}")
        alert.dismiss()
    except NoAlertPresentException:
        pass
    alerts = driver.execute_script("return window.__alerts")
    if alerts is None:
        problems.add(page.name, "the alert guard did not run")
    elif alerts:
        problems.add(page.name, f"alerts fired: {alerts}")
    scripts = driver.execute_script("return document.scripts.length")
    if scripts != SCRIPTS[kind]:
        problems.add(page.name, f"{scripts} script elements, a {kind} page has {SCRIPTS[kind]}")
    comments = driver.execute_script(
        "var w=document.createTreeWalker(document,NodeFilter.SHOW_COMMENT),n=0;"
        "while(w.nextNode())n++;return n"
    )
    if comments:
        problems.add(page.name, f"{comments} comment nodes (a text opened a comment?)")


def check_links(driver, site, page, problems):
    """Every href and src on the page: relative, a file inside the site (and an element
    of it, for a fragment)."""
    root = site.resolve()
    links = driver.execute_script(
        "return Array.prototype.map.call(document.querySelectorAll('[href],[src]'),function(e){"
        "var a=e.hasAttribute('href')?'href':'src',v=e.getAttribute(a);"
        "return [e.tagName,v,new URL(v,document.baseURI).href]})"
    )
    for tag, raw, resolved in links:
        what = f"<{tag.lower()}> {raw!r}"
        if urllib.parse.urlsplit(raw).scheme or raw.startswith("//"):
            problems.add(page.name, f"{what}: not a relative link")
            continue
        url = urllib.parse.urlsplit(resolved)
        if url.scheme != "file":
            problems.add(page.name, f"{what}: resolves to {resolved}")
            continue
        target = pathlib.Path(urllib.parse.unquote(url.path)).resolve()
        if not target.is_relative_to(root):
            problems.add(page.name, f"{what}: {target} is outside the site")
        elif not target.is_file():
            problems.add(page.name, f"{what}: {target} does not exist")
        elif url.fragment and target.suffix == ".html" and urllib.parse.unquote(url.fragment) not in ids_of(target):
            problems.add(page.name, f"{what}: {target.name} has no element #{url.fragment}")
    return len(links)


def cells(driver, row):
    return driver.execute_script(
        "return Array.prototype.map.call(arguments[0].cells,function(c){return c.textContent})", row
    )


def index_rows(driver):
    return driver.find_elements(By.CSS_SELECTOR, "#runs tbody tr")


def check_index_rows(driver, state, problems):
    """Every run once, with its texts as text; every group listed."""
    rows = index_rows(driver)
    slugs = [r.get_attribute("data-slug") for r in rows]
    if sorted(slugs) != sorted(state):
        problems.add("index.html", f"rows {sorted(slugs)}, the state's runs {sorted(state)}")
    header = [th.text for th in driver.find_elements(By.CSS_SELECTOR, "#runs thead th")]
    col = {name: i for i, name in enumerate(header)}
    for r in rows:
        slug = r.get_attribute("data-slug")
        if slug not in state:
            continue
        s = state[slug]
        texts = cells(driver, r)
        want = {
            "Group": f"{s['group']['model']} on {s['group']['hardware']}",
            "Model": s["model"],
            "Hardware": s["hardware"],
            "Engine": s["engine"],
            "Version": s["engine_version"],
        }
        for name, value in want.items():
            if texts[col[name]] != value:
                problems.add("index.html", f"row {slug}: {name} shown as {texts[col[name]]!r}, want {value!r}")
        for attr, value in (("model", s["model"]), ("gpu", s["gpu"]), ("engine", s["engine"])):
            if r.get_attribute(f"data-{attr}") != value:
                problems.add("index.html", f"row {slug}: data-{attr} {r.get_attribute(f'data-{attr}')!r}, want {value!r}")
        figures = texts[col["Figures from"]]
        if s["imported"]:
            if not figures.startswith("imported: llm-inference-bench ") or figures != f"imported: {s['imported']}":
                problems.add("index.html", f"imported run {slug}: Figures from {figures!r}")
        elif figures != "tokentrace":
            problems.add("index.html", f"recorded run {slug}: Figures from {figures!r}")
    groups = {b["group"]["slug"]: b["group"] for b in state.values()}
    listed = driver.execute_script(
        "return Array.prototype.map.call(document.querySelectorAll('#groups li a'),"
        "function(a){return [a.getAttribute('href'),a.textContent]})"
    )
    want = sorted([f"groups/{g['slug']}.html", f"{g['model']} on {g['hardware']}"] for g in groups.values())
    if sorted(listed) != want:
        problems.add("index.html", f"groups listed {sorted(listed)}, want {want}")
    return header


def click_header(driver, name):
    th = [t for t in driver.find_elements(By.CSS_SELECTOR, "#runs thead th") if t.text == name]
    if len(th) != 1:
        raise AssertionError(f"{len(th)} headers {name!r}")
    driver.execute_script("arguments[0].scrollIntoView()", th[0])
    th[0].click()
    return th[0]


def check_sorting(driver, header, problems):
    peak = header.index("Peak decode tok/s") + 1

    def column():
        return [
            td.get_attribute("data-sort")
            for td in driver.find_elements(By.CSS_SELECTOR, f"#runs tbody tr td:nth-child({peak})")
        ]

    th = click_header(driver, "Peak decode tok/s")
    values = column()
    numbers = [float(v) for v in values if v]
    empties = [v for v in values if not v]
    if None in values or not numbers or not empties:
        problems.add("index.html", f"peak decode column: want numbers and empty cells, got {values}")
    if numbers != sorted(numbers) or values[len(numbers):] != empties or th.get_attribute("aria-sort") != "ascending":
        problems.add("index.html", f"Peak decode clicked once: not ascending with empty cells last: {values} ({th.get_attribute('aria-sort')})")
    th = click_header(driver, "Peak decode tok/s")
    values = column()
    numbers = [float(v) for v in values if v]
    # The empty cells stay last both ways.
    if numbers != sorted(numbers, reverse=True) or values[len(numbers):] != empties or th.get_attribute("aria-sort") != "descending":
        problems.add("index.html", f"Peak decode clicked twice: not descending with empty cells last: {values} ({th.get_attribute('aria-sort')})")
    sort_note = "empty last both ways"

    model = header.index("Model")
    for clicks, order in ((1, "ascending"), (2, "descending")):
        th = click_header(driver, "Model")
        bad = driver.execute_script(
            "var rows=document.getElementById('runs').tBodies[0].rows,i=arguments[0],desc=arguments[1],bad=[];"
            "for(var k=1;k<rows.length;k++){var a=rows[k-1].cells[i].textContent,b=rows[k].cells[i].textContent;"
            "var r=a.localeCompare(b);if(desc?r<0:r>0)bad.push([a,b])}return bad",
            model,
            order == "descending",
        )
        if bad or th.get_attribute("aria-sort") != order:
            problems.add("index.html", f"Model clicked {clicks}×: not {order} by text ({th.get_attribute('aria-sort')}): out of order {bad}")
    return sort_note


def check_filters(driver, problems):
    rows = index_rows(driver)
    total = len(rows)
    selects = driver.find_elements(By.CSS_SELECTOR, "select[data-filter]")
    keys = [s.get_attribute("data-filter") for s in selects]
    if sorted(keys) != ["engine", "gpu", "model"]:
        problems.add("index.html", f"filters {keys}, want model, gpu and engine")

    def state():
        return driver.execute_script(
            "var t=document.getElementById('runs');return [Array.prototype.map.call(t.tBodies[0].rows,"
            "function(r){return [r.getAttribute('data-slug'),!r.hidden&&r.getClientRects().length>0]}),"
            "document.getElementById('shown').textContent]"
        )

    tried = 0
    for sel in selects:
        key = sel.get_attribute("data-filter")
        values = [r.get_attribute(f"data-{key}") for r in rows]
        options = [o.get_attribute("value") for o in Select(sel).options]
        if options[0] != "" or sorted(options[1:]) != sorted(set(values)):
            problems.add("index.html", f"filter {key}: options {options}, the rows' values {sorted(set(values))}")
        for i, v in enumerate(options):
            Select(sel).select_by_index(i)
            tried += 1
            shown, text = state()
            want = {s for (s, _), rv in zip(shown, values) if v == "" or rv == v}
            got = {s for s, visible in shown if visible}
            if got != want:
                problems.add("index.html", f"filter {key}={v!r}: shows {sorted(got)}, want {sorted(want)}")
            if text != f"{len(want)} of {total} runs shown":
                problems.add("index.html", f"filter {key}={v!r}: #shown says {text!r}, {len(want)} of {total} shown")
        Select(sel).select_by_index(0)
        shown, text = state()
        if not all(v for _, v in shown) or text != f"{total} of {total} runs shown":
            problems.add("index.html", f"filter {key} back to all: {sum(v for _, v in shown)} shown, #shown {text!r}")
    return tried


def check_hostile_index(driver, header, state, plain, problems):
    """The hostile runs' rows show their model as text: hostile.py's name exactly, or
    (on a public site, which drops what looks like a path in it) the state's."""
    hostile = {s: r["model"] for s, r in state.items() if r["model"].startswith("org/<!--<script>")}
    if not hostile or (plain and set(hostile.values()) != {HOSTILE_MODEL}):
        problems.add("index.html", f"the hostile runs' models are {sorted(set(hostile.values()))}, want {HOSTILE_MODEL!r}")
    for slug, model in hostile.items():
        row = driver.find_elements(By.CSS_SELECTOR, f'#runs tbody tr[data-slug="{slug}"]')
        if len(row) != 1:
            problems.add("index.html", f"hostile run {slug}: {len(row)} rows")
            continue
        texts = cells(driver, row[0])
        if texts[header.index("Model")] != model:
            problems.add("index.html", f"hostile run {slug}: model shown as {texts[header.index('Model')]!r}, want {model!r}")
    return hostile


def check_group(driver, page, group, members, problems):
    title = f"{group['model']} on {group['hardware']}"
    shown = driver.execute_script("return [document.title, document.querySelector('h1').textContent]")
    if shown != [title, title]:
        problems.add(page.name, f"title and heading {shown}, want {title!r}")
    slugs = [tr.get_attribute("data-slug") for tr in driver.find_elements(By.CSS_SELECTOR, "#over-time tbody tr")]
    want = [s for s, _ in sorted(members.items(), key=lambda kv: (kv[1]["started_utc"], kv[0]))]
    if slugs != want:
        problems.add(page.name, f"runs over time {slugs}, want {want} (by start)")


def check_run(driver, page, row, scoring, problems):
    run = scoring["run"]
    got = driver.execute_script(
        "function fact(k){var d=[].slice.call(document.querySelectorAll('dl.facts dt'))"
        ".filter(function(t){return t.textContent===k})[0];return d?d.nextElementSibling.textContent:null}"
        "var h=[].slice.call(document.querySelectorAll('h2')).filter(function(h){return h.textContent==='Launch command'})[0];"
        "var nav=document.querySelectorAll('nav.site');"
        "return {model:fact('Served model'),hardware:fact('Hardware'),"
        "launch:h?h.nextElementSibling.textContent:null,navs:nav.length,"
        "group:nav.length?nav[0].querySelectorAll('a')[1].textContent:null,"
        "first:document.body.firstElementChild===nav[0]}"
    )
    want = {
        "model": run["model"],
        "hardware": row["hardware"] if row["hardware"] != "unspecified hardware" else "not described",
        "launch": run.get("launch_command"),
        "navs": 1,
        "group": f"{row['group']['model']} on {row['group']['hardware']}",
        "first": True,
    }
    for k, v in want.items():
        if got[k] != v:
            problems.add(page.name, f"{k} shown as {got[k]!r}, want {v!r}")


def main():
    if len(sys.argv) < 5:
        print(__doc__, file=sys.stderr)
        return 2
    site, bin, shots = pathlib.Path(sys.argv[1]), sys.argv[2], pathlib.Path(sys.argv[3])
    sources = sys.argv[4:]
    shots.mkdir(parents=True, exist_ok=True)
    problems = Problems()
    state = {b["row"]["slug"]: b["row"] for b in json.loads((site / "tokentrace-site.json").read_text())["runs"].values()}
    index = site / "index.html"
    index_text = index.read_text()
    # A site built with --rules or --public does not hold the plain reports.
    plain = "re-scored" not in index_text and "public: host names" not in index_text
    run_pages = sorted((site / "runs").glob("*.html"))
    group_pages = sorted((site / "groups").glob("*.html"))
    if sorted(p.stem for p in run_pages) != sorted(state):
        problems.add("runs/", f"pages {[p.stem for p in run_pages]}, the state's runs {sorted(state)}")
    groups = {}
    for slug, r in state.items():
        groups.setdefault(r["group"]["slug"], (r["group"], {}))[1][slug] = r
    if sorted(p.stem for p in group_pages) != sorted(groups):
        problems.add("groups/", f"pages {[p.stem for p in group_pages]}, the state's groups {sorted(groups)}")

    if plain:
        matched = check_reports(site, bin, sources, state, problems)
        print(f"site: {len(matched)} run pages are their run's report plus the nav bar, their JSON the run's scoring")
    else:
        print("site: built with --rules or --public: run pages not compared with `report`")

    driver = browser.browser()
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": NO_ALERTS})
    links = 0
    try:
        load(driver, site, index, "index", problems)
        links += check_links(driver, site, index, problems)
        header = check_index_rows(driver, state, problems)
        hostile = check_hostile_index(driver, header, state, plain, problems)
        imported = sum(1 for r in state.values() if r["imported"])
        want = sum(1 for f in run_folders(sources) if "imported" in json.loads((f / "manifest.json").read_text()))
        if not imported or imported != want:
            problems.add("index.html", f"{imported} imported runs listed, the sources hold {want}")
        browser.screenshot(driver, shots, f"{site.name}-index")
        note = check_sorting(driver, header, problems)
        tried = check_filters(driver, problems)
        print(f"site: index: {len(state)} rows ({imported} imported, {len(hostile)} hostile), "
              f"sorted (descending puts {note}), {tried} filter choices")

        biggest = max(groups, key=lambda g: (len(groups[g][1]), g))
        for page in group_pages:
            load(driver, site, page, "group", problems)
            links += check_links(driver, site, page, problems)
            if page.stem in groups:
                check_group(driver, page, *groups[page.stem], problems)
            if page.stem == biggest:
                browser.screenshot(driver, shots, f"{site.name}-group")
        for page in run_pages:
            load(driver, site, page, "run", problems)
            links += check_links(driver, site, page, problems)
            if page.stem in state:
                scoring = json.loads((site / "runs" / f"{page.stem}.json").read_text())
                check_run(driver, page, state[page.stem], scoring, problems)
        print(f"site: {1 + len(group_pages) + len(run_pages)} pages opened offline, {links} links followed")
    finally:
        driver.quit()
    for p in problems:
        print(f"site: {p}", file=sys.stderr)
    if problems:
        print(f"FAILED: {len(problems)} problems", file=sys.stderr)
        return 1
    print(f"ok: {site} (screenshots in {shots})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
