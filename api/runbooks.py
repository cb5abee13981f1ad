"""The alerts' runbook as a page (`GET /runbooks`): docs/alerts.md, shipped in the package as static/alerts.md.

Every alert's `runbook_url` is `<the API's URL>/runbooks#<alertname in lower case>` (deploy/prometheus), so a page
or a notification opens its section on the API that raised the data, with no other server and no network. The
runbook uses headings, paragraphs, inline code and links only; this renders exactly those, with the anchors
GitHub gives the headings, so the same `#anchor` works on GitHub and here.
"""

from __future__ import annotations

import html
import re

TITLE = "isrwatch alerts: what each one means and what to do"
_LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")
_HEADING = re.compile(r"(#{1,6}) (.+)")


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but `-` and `_` dropped, spaces as `-`."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _inline(text: str) -> str:
    """Escaped text with `code` spans and links; a link to another file keeps its words (the API serves only this
    one), a link within the runbook stays a link."""
    out = []
    for i, part in enumerate(text.split("`")):
        if i % 2:
            out.append(f"<code>{html.escape(part)}</code>")
            continue
        last = 0
        for m in _LINK.finditer(part):
            out.append(html.escape(part[last : m.start()]))
            words, target = html.escape(m.group(1)), m.group(2)
            out.append(f'<a href="{html.escape(target)}">{words}</a>' if target.startswith("#") else words)
            last = m.end()
        out.append(html.escape(part[last:]))
    return "".join(out)


def render(markdown: str) -> str:
    """The runbook's markdown as a standalone HTML page: each heading with its anchor as `id`, each paragraph one."""
    body, paragraph = [], []

    def flush() -> None:
        if paragraph:
            body.append(f"<p>{_inline(' '.join(paragraph))}</p>")
            paragraph.clear()

    for line in markdown.splitlines():
        heading = _HEADING.fullmatch(line.strip())
        if heading:
            flush()
            level, text = len(heading.group(1)), heading.group(2)
            body.append(f'<h{level} id="{anchor(text)}">{_inline(text)}</h{level}>')
        elif line.strip():
            paragraph.append(line.strip())
        else:
            flush()
    flush()
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(TITLE)}</title>"
        "<style>body{font-family:system-ui,sans-serif;max-width:52em;margin:2em auto;padding:0 1em;line-height:1.5}"
        "code{background:#f1f3f5;padding:0 .2em}</style></head>\n"
        "<body><main>\n" + "\n".join(body) + "\n</main></body></html>\n"
    )
