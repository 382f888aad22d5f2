"""Saves the README's screenshot of an HTML report: the decode matrix with one cell's
drill-down open, in headless Chromium (Selenium, the system's chromedriver).

usage: screenshot.py PAGE.html CONTEXT CONCURRENCY OUT.png
"""

import pathlib
import sys

from PIL import Image
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By


def main():
    if len(sys.argv) != 5:
        print(__doc__, file=sys.stderr)
        return 2
    page, context, concurrency, out = sys.argv[1:]
    opts = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                "--window-size=1100,1250", "--host-resolver-rules=MAP * ~NOTFOUND"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(options=opts, service=Service("/usr/bin/chromedriver"))
    try:
        driver.get(pathlib.Path(page).resolve().as_uri())
        sel = f'#matrix td[data-context="{context}"][data-concurrency="{concurrency}"]'
        driver.find_element(By.CSS_SELECTOR, sel).click()
        driver.execute_script(
            "var h=[].find.call(document.querySelectorAll('h2'),function(x){"
            "return x.textContent=='Sustained decode'});"
            "window.scrollTo(0,h.getBoundingClientRect().top+window.scrollY-10)"
        )
        driver.save_screenshot(out)
    finally:
        driver.quit()
    # The matrix, the legend and the drill-down's first charts; 128 colours keep it small.
    shot = Image.open(out).convert("RGB")
    shot = shot.crop((0, 0, shot.width, min(850, shot.height)))
    shot.quantize(colors=128, method=Image.Quantize.MEDIANCUT).save(out, optimize=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
