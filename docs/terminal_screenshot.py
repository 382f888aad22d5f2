"""Saves the README's screenshot of the full-screen view mid-run: runs a command in a
pseudo-terminal, feeds its output to a terminal emulator (pyte), takes the screen once
the matrix is partly filled and a cell is under way, and draws it (Pillow, DejaVu Sans
Mono) with its colours and bold.

usage: terminal_screenshot.py OUT.png COLS ROWS DONE_CELLS -- COMMAND...
"""

import os
import pty
import re
import select
import signal
import struct
import sys
import fcntl
import termios
import time

import pyte
from PIL import Image, ImageDraw, ImageFont

FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf"
BOLD = "/usr/share/fonts/truetype/dejavu/DejaVuSansMono-Bold.ttf"
SIZE = 14
BG = (24, 26, 33)
FG = (220, 223, 228)
NAMED = {
    "black": (40, 42, 54), "red": (255, 110, 103), "green": (90, 247, 142),
    "brown": (243, 249, 157), "yellow": (243, 249, 157), "blue": (87, 199, 255),
    "magenta": (255, 106, 193), "cyan": (154, 237, 254), "white": (241, 241, 240),
}


def colour(c, default):
    if c == "default":
        return default
    if c in NAMED:
        return NAMED[c]
    if re.fullmatch(r"[0-9a-fA-F]{6}", c):
        return tuple(int(c[i:i + 2], 16) for i in (0, 2, 4))
    return default


def ready(screen, done_cells):
    """Partly filled: DONE_CELLS cells done, a cell under way for 3 s with its tok/s."""
    text = "\n".join(screen.display)
    m = re.search(r"cells (\d+)/(\d+) done", text)
    return bool(m) and int(m.group(1)) >= done_cells \
        and re.search(r"· [\d,.]+K? tok/s · 0:00:0[3-9]", text) is not None


def draw(screen, out):
    font, bold = ImageFont.truetype(FONT, SIZE), ImageFont.truetype(BOLD, SIZE)
    cw, ch = round(font.getlength("M")), sum(font.getmetrics())
    img = Image.new("RGB", (cw * screen.columns + 24, ch * screen.lines + 24), BG)
    d = ImageDraw.Draw(img)
    for y in range(screen.lines):
        row = screen.buffer[y]
        for x in range(screen.columns):
            c = row[x]
            fg, bg = colour(c.fg, FG), colour(c.bg, BG)
            if c.reverse:
                fg, bg = bg, fg
            px, py = 12 + x * cw, 12 + y * ch
            if bg != BG:
                d.rectangle([px, py, px + cw, py + ch], fill=bg)
            if c.data.strip():
                d.text((px, py), c.data, font=bold if c.bold else font, fill=fg)
    img.save(out, optimize=True)


def main():
    if "--" not in sys.argv or len(sys.argv) < 7:
        print(__doc__, file=sys.stderr)
        return 2
    sep = sys.argv.index("--")
    out, cols, rows, done_cells = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    command = sys.argv[sep + 1:]
    screen = pyte.Screen(cols, rows)
    stream = pyte.ByteStream(screen)
    pid, fd = pty.fork()
    if pid == 0:
        os.environ["TERM"] = "xterm-256color"
        os.execvp(command[0], command)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    os.kill(pid, signal.SIGWINCH)
    taken = False
    deadline = time.time() + 600
    while time.time() < deadline:
        r, _, _ = select.select([fd], [], [], 0.2)
        if r:
            try:
                data = os.read(fd, 65536)
            except OSError:
                break
            if not data:
                break
            stream.feed(data)
        if not taken and ready(screen, done_cells):
            # A frame is drawn whole every 250 ms: let the next one land first.
            end = time.time() + 0.3
            while time.time() < end:
                r, _, _ = select.select([fd], [], [], 0.05)
                if r:
                    stream.feed(os.read(fd, 65536))
            draw(screen, out)
            print("\n".join(line.rstrip() for line in screen.display))
            taken = True
            os.write(fd, b"q")
    os.waitpid(pid, 0)
    return 0 if taken else 1


if __name__ == "__main__":
    sys.exit(main())
