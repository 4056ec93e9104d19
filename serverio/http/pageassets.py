"""The listing page's constant style, scripts and icons, and its CSP (pure).

Everything here is a constant: no name, path or header ever reaches a
script or the style, so one hash per element allows it under the page's
Content-Security-Policy (CSP Level 3 §8.4) and nothing else runs.

* :data:`STYLE`: the layout from 320 px to wide screens (the upload row and
  the toolbar wrap; the Modified column drops its time of day below 40rem
  and hides below 24rem; names wrap at word boundaries, breaking inside a
  word only when one is longer than the line), the light and dark themes
  (automatic by default, ``prefers-color-scheme``; a choice the reader made
  with the toggle is ``<html data-theme>``), a visible focus ring.
* :data:`HEAD_SCRIPT`: applies the remembered theme before the first paint.
* :data:`SCRIPT`: the page's behaviour, in small parts on one object,
  ``self.serverio``, that a second script (the write actions) can use:
  ``say(text, error)`` (the status line), ``fetch(url, init)`` (asks for
  ``application/problem+json`` and shows a problem's ``detail``),
  ``rows()`` (the table's entry rows).  The parts: the theme toggle, local
  times (the server writes UTC; the UTC time stays in the tooltip), the
  progressive filter, keyboard navigation (arrow keys between rows, from
  a row's link or its actions button, Home and End; Enter follows the
  focused link natively).
* :data:`UPLOAD_SCRIPT`: the upload form's resumable uploader
  (:mod:`serverio.http.uploader`).
* :data:`ACTIONS_SCRIPT`: the rows' rename, move, delete and download
  (:mod:`serverio.http.rowactions`), where the reader may delete.
* :data:`SPRITE` and :func:`icon_of`: inline SVG icons by type (one
  ``<symbol>`` each, referenced by ``<use href="#...">``: same-document,
  nothing fetched).
"""

from __future__ import annotations

from typing import Final

from .hashsource import sha256_source
from .rowactions import ACTIONS_CSS, ACTIONS_SCRIPT, ACTIONS_SOURCE
from .selection import SELECT_CSS
from .uploader import UPLOADER_SCRIPT

__all__ = [
    "ACTIONS_SCRIPT",
    "ACTIONS_SOURCE",
    "HEAD_SCRIPT",
    "LISTING_CSP",
    "LISTING_UPLOAD_CSP",
    "SCRIPT",
    "SPRITE",
    "STYLE",
    "UPLOAD_SCRIPT",
    "icon_of",
    "sha256_source",
]

# Light: text #1f2328 on #fff is 15.8:1, muted #59636e 6.1:1, links #0969da
# 5.1:1.  Dark: #e6edf3 on #0d1117 is 16:1, muted #9198a1 6.2:1, links
# #4493f8 6.0:1 (WCAG 2.2 SC 1.4.3 asks 4.5:1).
_LIGHT: Final = (
    "--fg:#1f2328;--bg:#fff;--mute:#59636e;--line:#d1d9e0;--link:#0969da;--row:#f6f8fa;"
    "--warn-bg:#fff8c5;--warn:#6c4400;--bad:#b3261e"
)
_DARK: Final = (
    "--fg:#e6edf3;--bg:#0d1117;--mute:#9198a1;--line:#3d444d;--link:#4493f8;--row:#151b23;"
    "--warn-bg:#3b2e00;--warn:#f2cc60;--bad:#ff8a80"
)

_CSS: Final = f"""\
:root{{color-scheme:light dark;{_LIGHT}}}
@media (prefers-color-scheme:dark){{:root:not([data-theme=light]){{color-scheme:dark;{_DARK}}}}}
:root[data-theme=light]{{color-scheme:light}}:root[data-theme=dark]{{color-scheme:dark;{_DARK}}}
*{{box-sizing:border-box}}
body{{margin:0 auto;max-width:64rem;padding:1rem;font:15px/1.5 system-ui,sans-serif;\
color:var(--fg);background:var(--bg)}}
h1{{font-size:1.25rem;font-weight:600;margin:0 0 .5rem;overflow-wrap:anywhere}}
a{{color:var(--link);text-decoration:none}}a:hover{{text-decoration:underline}}
:focus-visible{{outline:2px solid var(--link);outline-offset:2px;border-radius:2px}}
nav ol{{display:flex;flex-wrap:wrap;list-style:none;margin:0 0 .75rem;padding:0;color:var(--mute)}}
nav li+li::before{{content:"\\203a";margin:0 .4rem}}
.sr{{position:absolute;width:1px;height:1px;overflow:hidden;clip-path:inset(50%);white-space:nowrap}}
.bar{{display:flex;flex-wrap:wrap;gap:.5rem;align-items:center;margin:0 0 .75rem}}
.bar form{{display:flex;flex-wrap:wrap;gap:.5rem;flex:1 1 16rem;margin:0}}
.bar .links{{display:flex;flex-wrap:wrap;gap:.25rem .75rem;align-items:center}}
input,button{{font:inherit;padding:.25rem .6rem;color:var(--fg);background:var(--bg);\
border:1px solid var(--line);border-radius:6px;min-height:2rem}}
button{{background:var(--row);cursor:pointer}}
.bar input[type=search]{{flex:1 1 10rem;min-width:0}}
table{{width:100%;border-collapse:collapse;table-layout:auto}}
th,td{{padding:.35rem .5rem;text-align:left;border-bottom:1px solid var(--line);vertical-align:top}}
th{{font-weight:600;color:var(--mute);white-space:nowrap}}
tbody tr:hover{{background:var(--row)}}
td.name{{width:100%;overflow-wrap:anywhere;word-break:normal}}
td.name a{{display:inline}}
td.name svg{{width:1.1em;height:1.1em;vertical-align:-.2em;margin-right:.4em;fill:none;\
stroke:var(--mute);stroke-width:1.6}}
.dir svg{{stroke:var(--link)}}
td.size,td.time{{text-align:right;white-space:nowrap;color:var(--mute);\
font-variant-numeric:tabular-nums}}
th.size,th.time{{text-align:right}}
.dir a{{font-weight:600}}
.sprite{{position:absolute;width:0;height:0;overflow:hidden}}
.notice{{padding:.5rem .75rem;border-radius:6px;background:var(--warn-bg);color:var(--warn)}}
#status:empty{{display:none}}#status.bad{{color:var(--bad)}}
footer{{margin-top:1rem;color:var(--mute);font-size:.85rem}}
.upload{{display:flex;flex-wrap:wrap;gap:.5rem 1.5rem;margin:0 0 .75rem;padding:.5rem .75rem;\
border:1px dashed var(--line);border-radius:6px}}
.upload form{{display:flex;flex-wrap:wrap;gap:.5rem;align-items:center;margin:0;min-width:0}}
.upload input{{max-width:100%;min-width:0}}
.upload .hint{{color:var(--mute);align-self:center}}
body.dropping .upload{{border-color:var(--link);background:var(--row)}}
.readme{{margin-top:1.5rem;padding:0 1.25rem 1rem;border:1px solid var(--line);\
border-radius:6px;overflow-wrap:anywhere}}
.readme h2{{font-size:1rem;margin:0 -1.25rem 1rem;padding:.5rem 1.25rem;\
border-bottom:1px solid var(--line)}}
.readme a{{text-decoration:underline}}
.readme pre{{white-space:pre-wrap;font:13px/1.45 ui-monospace,monospace}}
.readme code{{font:13px ui-monospace,monospace;background:var(--row);padding:.1rem .3rem;\
border-radius:4px}}
.readme pre code{{padding:0;background:none}}.readme img{{max-width:100%}}
.readme table{{width:auto}}.readme blockquote{{margin:0;padding-left:1rem;color:var(--mute);\
border-left:3px solid var(--line)}}
@media (max-width:40rem){{body{{padding:.75rem .5rem}}time span{{display:none}}\
th,td{{padding:.35rem .3rem}}}}
@media (max-width:24rem){{.time{{display:none}}}}
nav.account{{float:right;margin:0}}nav.account form{{display:inline;margin:0 0 0 .5rem}}
nav.account button{{font:inherit;padding:0 .4rem}}
"""

# The exact text of the page's <style> element: the page's, then the row
# actions' (serverio.http.rowactions) and the selection's
# (serverio.http.selection).
STYLE: Final = "\n" + _CSS + ACTIONS_CSS + SELECT_CSS

HEAD_SCRIPT: Final = (
    '(()=>{try{const m=localStorage.getItem("serverio-theme");'
    'if(m==="light"||m==="dark")document.documentElement.dataset.theme=m}catch(e){}})();'
)

# self.serverio: the page's parts, for a second script (write actions) to use.
SCRIPT: Final = """
(()=>{const d=document,S=self.serverio=self.serverio||{},st=d.getElementById("status");
S.say=(m,bad)=>{if(st){st.textContent=m;st.className=bad?"bad":""}};
S.rows=()=>[...d.querySelectorAll("tbody tr.entry")];
S.fetch=async(u,o={})=>{const h=new Headers(o.headers||{});
if(!h.has("Accept"))h.set("Accept","application/problem+json, application/json;q=0.9");
const r=await fetch(u,{...o,headers:h});if(r.ok)return r;let p={};
try{p=await r.json()}catch(e){}const m=p.detail||p.title||r.status+" "+r.statusText;
S.say(m,true);throw Object.assign(new Error(m),{problem:p,status:r.status})};
const R=d.documentElement,tb=d.getElementById("theme"),K="serverio-theme",M=["auto","light","dark"];
if(tb)tb.hidden=false;
const show=m=>{if(m==="auto")delete R.dataset.theme;else R.dataset.theme=m;
if(tb){tb.textContent="Theme: "+m;tb.setAttribute("aria-label","Colour theme: "+m+". Change")}};
show(R.dataset.theme||"auto");
if(tb)tb.addEventListener("click",()=>{const m=M[(M.indexOf(R.dataset.theme||"auto")+1)%3];
show(m);try{m==="auto"?localStorage.removeItem(K):localStorage.setItem(K,m)}catch(e){}});
const p=n=>String(n).padStart(2,"0");
for(const t of d.querySelectorAll("time[datetime]")){const v=new Date(t.dateTime);
if(isNaN(v))continue;t.title=t.dateTime.slice(0,16).replace("T"," ")+" UTC";
const h=d.createElement("span");
h.textContent=" "+p(v.getHours())+":"+p(v.getMinutes());
t.replaceChildren(v.getFullYear()+"-"+p(v.getMonth()+1)+"-"+p(v.getDate()),h)}
const tz=d.getElementById("tz");if(tz)tz.textContent="local times (UTC in each tooltip)";
const f=d.querySelector("form.search input[name=filter]");
if(f){const rows=S.rows().map(r=>[r,r.querySelector("td.name a").textContent.toLowerCase()]);
f.addEventListener("input",()=>{const q=f.value.trim().toLowerCase();
for(const[r,n]of rows)r.hidden=q!==""&&!n.includes(q)})}
d.addEventListener("keydown",e=>{const k=e.key;if(e.altKey||e.ctrlKey||e.metaKey)return;
if(!["ArrowDown","ArrowUp","Home","End"].includes(k))return;
const a=d.activeElement,L=[...d.querySelectorAll("tbody tr:not([hidden]) td.name a")];
const i=L.indexOf(a.closest("td.act")?a.closest("tr").querySelector("td.name a"):a);
if(i<0&&a!==d.body&&a!==f)return;if(i<0&&(k==="Home"||k==="End"))return;e.preventDefault();
const j=k==="Home"?0:k==="End"?L.length-1:i<0?0:
Math.max(0,Math.min(L.length-1,i+(k==="ArrowDown"?1:-1)));
if(L[j])L[j].focus()})})();
"""

# The upload form's script (``--upload``, a writable directory): the
# resumable uploader (serverio.http.uploader; the page works without it).
UPLOAD_SCRIPT: Final = UPLOADER_SCRIPT

# Icons (24x24 strokes): folder, file, text, image, audio/video, archive.
_ICONS: Final = {
    "d": '<path d="M3 6h6l2 2h10v11H3z"/>',
    "f": '<path d="M6 3h8l4 4v14H6z"/>',
    "t": '<path d="M6 3h8l4 4v14H6zM9 11h6M9 15h6"/>',
    "i": '<path d="M4 5h16v14H4z"/><path d="M4 16l5-5 4 4 3-3 4 4"/>',
    "m": '<path d="M6 3h8l4 4v14H6z"/><path d="M10 10v6l5-3z"/>',
    "a": '<path d="M4 7h16v13H4zM3 4h18v3H3zM10 11h4"/>',
}
SPRITE: Final = (
    '<svg class="sprite" aria-hidden="true" focusable="false">'
    + "".join(f'<symbol id="i-{k}" viewBox="0 0 24 24">{v}</symbol>' for k, v in _ICONS.items())
    + "</svg>"
)

_KINDS: Final = {
    "t": "txt md rst log csv tsv json yaml yml toml ini cfg conf xml html htm css js ts py rs go "
    "c h cpp hpp java kt rb php sh pl lua sql tex",
    "i": "png jpg jpeg gif webp avif svg bmp ico tif tiff heic",
    "m": "mp3 ogg oga opus flac wav m4a aac mp4 m4v webm mkv mov avi",
    "a": "zip tar gz tgz bz2 xz zst 7z rar iso deb rpm whl jar",
}
_KIND_OF: Final = {ext: kind for kind, exts in _KINDS.items() for ext in exts.split()}


def icon_of(name: str, is_dir: bool) -> str:
    """The icon's symbol id for an entry: ``d`` a folder, else by the
    extension (lower-cased): ``t`` text, ``i`` image, ``m`` audio or video,
    ``a`` archive, ``f`` any other file."""
    if is_dir:
        return "d"
    dot = name.rfind(".")
    if dot <= 0:
        return "f"
    return _KIND_OF.get(name[dot + 1 :].lower(), "f")


# The page loads nothing and allows only its own inline style and scripts,
# each by hash (CSP Level 3 §8.4): a name that slipped past escaping still
# could not execute, rebase links or frame the page.  Forms may submit only
# to this origin (the search box is a GET form to the page itself), images
# load only from it (a README's relative images; serverio.http.readme);
# fetch() from the page's scripts reaches only this origin.
_SCRIPTS: Final = f"{sha256_source(HEAD_SCRIPT)} {sha256_source(SCRIPT)}"
LISTING_CSP: Final = (
    f"default-src 'none'; style-src {sha256_source(STYLE)}; "
    f"script-src {_SCRIPTS}; img-src 'self'; connect-src 'self'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'"
).encode("ascii")
# The same for a listing with the upload form: its drag-and-drop script too
# (form-action 'self' already lets the forms post to this origin).
LISTING_UPLOAD_CSP: Final = LISTING_CSP.replace(
    b"script-src " + _SCRIPTS.encode("ascii"),
    b"script-src " + _SCRIPTS.encode("ascii") + b" " + sha256_source(UPLOAD_SCRIPT).encode("ascii"),
)
