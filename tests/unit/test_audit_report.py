"""`audit report`: the HTML page of a real log, its content, and that nothing in it runs.

Two tests start Debian's headless Chromium (scripts/ensure-host-tools.sh installs it): one dumps
the DOM after the page loaded, one takes a screenshot and reads its pixels.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from executor import audit
from executor.audit_formats import report
from executor.cli import app
from tests.fakes.audit_log import SECRET, Clock, full_run, writer

TITLE = "sandbox-agent audit report"


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "audit"
    full_run(directory)
    return directory


def render(directory: Path, *args: str) -> str:
    result = CliRunner().invoke(app, ["audit", "report", "--audit-dir", str(directory), *args])
    assert result.exit_code == 0, result.output
    return result.stdout


# ---------------------------------------------------------------------------- the page


def test_every_kind_has_its_own_rendering() -> None:
    for kind in (*audit.RECORD_KINDS, *audit.PLANNED_KINDS):
        assert kind in report._RENDERERS, kind


def test_page_is_self_contained_and_shows_every_record(log_dir: Path) -> None:
    page = render(log_dir)
    records = list(audit.read_records(log_dir))
    assert page.isascii() and page.startswith("<!DOCTYPE html>")
    head = page[: page.index("</head>")]
    assert head.index("Content-Security-Policy") < head.index("<style>")
    assert "default-src 'none'" in head and "script-src 'none'" in head
    assert "<script" not in page and not re.search(r"<[^>]*\b(src|href)\s*=", page)
    for record in records:
        assert f"id='seq-{record['seq']}'" in page
    assert SECRET not in page and "[REDACTED:env:DEPLOY_TOKEN]" in page


def test_page_shows_verification_totals_denials_and_diffs(log_dir: Path) -> None:
    page = render(log_dir)
    assert "Chain verified: 23 records in 1 file(s), seq 1..23" in page
    totals = page[page.index("id=totals"): page.index("<h2>Denials")]
    assert "<th>tool calls</th><td>6 (2 denied or rejected)</td>" in totals
    assert "<th>tokens</th><td>310 in, 42 out</td>" in totals
    assert "<th>files changed</th><td>2</td>" in totals  # calc.py (edited, applied), planted
    assert "<th>time</th><td>4200 ms in runs" in totals
    denials = page[page.index("id=denials"): page.index("<h2>Timeline")]
    assert "policy.toml:9 [[rules]] #4 (curl)" in denials and "no_such_tool" in denials
    assert "approved by <b>user</b>, rule <code>policy.toml:3 [[rules]] #1 (edit)" in page
    assert "<span class='del'>-a - b</span>" in page and "<span class='add'>+a + b</span>" in page
    assert "content not recorded: the log keeps this file's hashes" in page


def test_hostile_strings_are_text_not_markup(log_dir: Path) -> None:
    page = render(log_dir)
    assert "<img" not in page and "onerror=" not in page.replace("onerror=&quot;", "")
    assert "&lt;img src=x onerror=&quot;document.title=&#x27;PWNED-IMG&#x27;&quot;&gt;.py" in page
    assert "&lt;script&gt;document.title=&quot;PWNED-SCRIPT&quot;&lt;/script&gt;" in page


def test_control_and_bidi_characters_are_shown_escaped(tmp_path: Path) -> None:
    log = writer(tmp_path)
    log.record("warning", message="evil\x1b[2K\u202etxt.exe</li><script>x()</script>")
    page = render(tmp_path)
    assert "evil\\x1b[2K\\u202etxt.exe&lt;/li&gt;&lt;script&gt;" in page
    assert "\x1b" not in page and "\u202e" not in page


def test_a_tampered_log_says_so_at_the_top(log_dir: Path) -> None:
    day = next(log_dir.glob("*.ndjson"))
    day.write_bytes(day.read_bytes().replace(b'"turns":3', b'"turns":1'))
    page = render(log_dir)
    top = page[page.index("<body>"): page.index("<h2>Totals")]
    assert "Chain verification FAILED: edited record at" in top and "class='status bad'" in top


def test_session_and_time_range(tmp_path: Path) -> None:
    clock = Clock()
    full_run(tmp_path, session="first", clock=clock)
    full_run(tmp_path, session="second", clock=clock)
    only = render(tmp_path, "--session", "second")
    assert "session second" in only and "session first" not in only
    first_second = audit.format_ts(audit.parse_since("2024-05-01T09:30:05.6"))
    early = render(tmp_path, "--until", first_second)
    assert "session first" in early and "session second" not in early
    assert "<th>records</th><td>22</td>" in early
    assert "until 2024-05-01T09:30:05.600000Z" in early


def test_a_bad_until_is_one_error_line_naming_it(log_dir: Path) -> None:
    result = CliRunner().invoke(app, ["audit", "report", "--audit-dir", str(log_dir),
                                      "--until", "soon"])
    assert result.exit_code == 2 and "--until 'soon' is neither" in result.stderr
    assert "Traceback" not in result.output


def test_report_to_a_private_file(log_dir: Path, tmp_path: Path) -> None:
    target = tmp_path / "report.html"
    result = CliRunner().invoke(app, ["audit", "report", "--audit-dir", str(log_dir),
                                      "-o", str(target)])
    assert result.exit_code == 0 and "reported 23 record(s)" in result.stderr
    assert target.stat().st_mode & 0o777 == 0o600 and TITLE in target.read_text()


# ---------------------------------------------------------------------------- in a browser


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("chromium")
    if binary is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("CI=true but chromium is not installed (scripts/ensure-host-tools.sh)")
        pytest.skip("chromium is not installed (scripts/ensure-host-tools.sh installs it)")
    flags = ["--headless", "--disable-gpu", f"--user-data-dir={tmp_path / 'profile'}",
             "--no-first-run", *(["--no-sandbox"] if os.geteuid() == 0 else [])]
    return subprocess.run([binary, *flags, *args], capture_output=True, text=True, timeout=120,
                          check=True)


@pytest.fixture
def page_file(log_dir: Path, tmp_path: Path) -> Path:
    target = tmp_path / "report.html"
    target.write_text(render(log_dir))
    return target


def test_in_chromium_no_planted_script_or_handler_runs(page_file: Path, tmp_path: Path) -> None:
    dom = chromium(tmp_path, "--dump-dom", page_file.as_uri()).stdout
    assert f"<title>{TITLE}</title>" in dom  # a planted script would have set PWNED-...
    assert "PWNED-SCRIPT" in dom and "PWNED-IMG" in dom  # shown, as text
    body = dom[dom.index("<body>"):]
    assert not re.search(r"<(script|img|iframe|object|svg)\b", body)
    assert "&lt;img src=x onerror=" in body and "Chain verified: 23 records" in body


def test_in_chromium_the_page_renders_with_its_own_style(page_file: Path, tmp_path: Path) -> None:
    shot = tmp_path / "shot.png"
    chromium(tmp_path, f"--screenshot={shot}", "--window-size=1000,700", page_file.as_uri())
    width, height, pixel = png_pixels(shot.read_bytes())
    assert (width, height) == (1000, 700)
    # The verification banner is green: the stylesheet applied under the CSP (by its hash).
    banner = [pixel(x, y) for x in range(30, 600, 40) for y in range(40, 140, 4)]
    assert (0xE3, 0xF6, 0xE3) in banner
    assert len(set(pixel(x, y) for x in range(0, 1000, 7) for y in range(0, 700, 7))) > 8


def png_pixels(data: bytes) -> tuple[int, int, callable]:  # type: ignore[valid-type]
    """Width, height and an (x, y) -> (r, g, b) lookup of an 8-bit RGB(A) PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", b""
    while pos < len(data):
        size, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + size]
        header = chunk if kind == b"IHDR" else header
        idat += chunk if kind == b"IDAT" else b""
        pos += 12 + size
    width, height, depth, color = struct.unpack(">IIBB", header[:10])
    assert depth == 8 and color in (2, 6) and header[12] == 0  # 8-bit, not interlaced
    step = 4 if color == 6 else 3
    rows = _unfilter(zlib.decompress(idat), width * step, height, step)
    return width, height, lambda x, y: tuple(rows[y][x * step: x * step + 3])


def _unfilter(raw: bytes, stride: int, height: int, step: int) -> list[bytearray]:
    rows: list[bytearray] = []
    previous = bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        for i in range(stride):
            left = line[i - step] if i >= step else 0
            up, corner = previous[i], previous[i - step] if i >= step else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc
                                      else corner)) & 0xFF
        rows.append(line)
        previous = line
    return rows
