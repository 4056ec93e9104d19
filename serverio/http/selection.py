"""The listing page's selection and its text editor (pure constants).

Two constant scripts, each allowed by its hash under the listing's
Content-Security-Policy (CSP Level 3 §8.4); no name, path or header ever
reaches their text.  What they do is docs/reference/listing.md,
"Selection" and "Editor".

* :data:`SELECT_SCRIPT` (on the page when the folder offers archives or
  the reader may delete here): a checkbox per row ("Select NAME"), a
  "Select all" box in the header, shift-click for a range (of the rows
  the filter shows); with a selection, the toolbar's "N selected",
  "Download selected" (with archives) and "Delete selected..." (only
  when the reader may delete every selected row).  It also puts an
  "Edit" button on the rows of text files (by extension) of at most
  :data:`EDITOR_MAX` bytes that the reader may overwrite.
* :data:`TOOLS_SCRIPT`, what those buttons do, loaded on the first click
  of one: fetched from the listing itself (``?asset=tools``,
  :data:`TOOLS_QUERY`: whoever may read the listing may load it, and it
  has no path of its own for access rules to name) and inserted as an
  inline script, which the page's policy allows by its hash
  (:data:`TOOLS_SOURCE`; its style by :data:`TOOLS_STYLE_SOURCE`), so the
  listing's page weight stays without it:

  - download: ``?archive=zip&name=...``, each name the row link's own
    encoded segment (so its exact bytes; :mod:`serverio.archive.plan`),
    or the folder's archive when every row of a whole listing is selected;
  - delete: a confirmation naming what goes, then one ``DELETE`` per row
    through ``self.serverio.fetch``, stopping at the first refusal, whose
    problem detail the status line shows;
  - the editor, a modal dialog: loads the file with ``GET`` and
    ``Range: bytes=0-`` (a range is never content-coded, so the ``ETag``
    is the file's own, the one a write's precondition compares), refuses
    what is over :data:`EDITOR_MAX` or not UTF-8, and saves with ``PUT``
    and ``If-Match: <that ETag>`` (RFC 9110 §13.1.1): when another writer
    changed the file meanwhile, the server answers 412 and the dialog
    says so, offering Reload (their version) and "Save as copy" (a new
    name, ``If-None-Match: *``, never replacing a file).

The server decides every request (read, overwrite, upload, delete
rights): the page only hides what the reader may not do.

Rights are read from the page (:class:`serverio.http.listing.PageRights`,
the access hook's answers): a row's ``data-may`` tokens, else the
table's (the folder's); ``delete`` and ``overwrite`` (on the text files
the editor opens) are what these scripts look for.
"""

from __future__ import annotations

from typing import Final

from .hashsource import sha256_source

__all__ = [
    "EDITOR_MAX",
    "SELECT_CSS",
    "SELECT_SCRIPT",
    "SELECT_SOURCE",
    "TOOLS_ASSET",
    "TOOLS_CSS",
    "TOOLS_QUERY",
    "TOOLS_SCRIPT",
    "TOOLS_SOURCE",
    "TOOLS_STYLE_SOURCE",
]

# The largest file the editor opens (bytes): a textarea stays responsive
# and a save is one small PUT.
EDITOR_MAX: Final = 1 << 20
# The listing query that answers with the tools' script (?asset=tools).
TOOLS_QUERY: Final = "tools"

# Its part of the page's style (appended to serverio.http.pageassets.STYLE).
SELECT_CSS: Final = """\
.sel{width:1.5rem;padding-right:0}.sel input{min-height:0;width:1.25rem;height:1.25rem;margin:0}
#sel:not([hidden]){display:contents}.ed{margin-left:.5rem;min-height:0;padding:0 .4rem}
"""

# Q: querySelector; E: make an element (appended to p when p is given);
# may(r,w): has the reader right w on row r; C(r): its checkbox; L(): the
# rows the filter shows; S.X(): those selected; G(f,a): a button's
# handler that runs the lazily loaded tools' f.  Buttons outside a form
# need no type; ariaLabel is the reflected aria-label (ARIA 1.2 ARIAMixin).
SELECT_SCRIPT: Final = """
(()=>{const d=document,S=self.serverio,Q=(s,e=d)=>e.querySelector(s),T=Q("table"),B=Q(".bar");
if(!S||!T||!B)return;const R=S.rows,
may=S.may=(r,w)=>(r.dataset.may??T.dataset.may??"").split(" ").includes(w),
E=S.E=(t,p,x,a)=>{const e=Object.assign(d.createElement(t),a);if(x)e.textContent=x;
p&&p.append(e);return e},nm=S.nm=r=>Q("td.name a",r).textContent.replace(/\\/$/,""),
C=r=>Q(".sel input",r),L=()=>R().filter(r=>!r.hidden),X=S.X=()=>L().filter(r=>C(r).checked),
G=(f,a)=>async()=>{await(S.tl=S.tl||fetch("?asset=tools").then(r=>r.text())
.then(t=>E("script",d.body,t)));S.tools[f](a)};
for(const r of R())if(Q('use[href="#i-t"]',r)&&
parseInt(Q(".size",r).title)<=1048576&&may(r,"overwrite"))
E("button",r.cells[0],"Edit",{className:"ed",onclick:G("edit",r),ariaLabel:"Edit "+nm(r)});
const Z=Q('.bar a[href="?archive=zip"]'),Y=R().some(r=>may(r,"delete"));if(!Z&&!Y)return;
const P=E("span",B,"",{id:"sel",hidden:true}),N=E("span",P),H=E("th",0,"",{className:"sel"}),
all=E("input",H,"",{type:"checkbox",ariaLabel:"Select all"});let last;
if(Z)E("button",P,"Download selected",{onclick:G("zip")});
const x=Y&&E("button",P,"Delete selected\\u2026",{onclick:G("del")});T.tHead.rows[0].prepend(H);
const up=S.up=()=>{const s=X();P.hidden=!s.length;N.textContent=s.length+" selected";
if(x)x.hidden=!s.every(r=>may(r,"delete"));all.checked=s.length>0&&s.length===L().length};
for(const r of T.tBodies[0].rows){const c=E("td",0,"",{className:"sel"});r.prepend(c);
if(!r.matches(".entry"))continue;
const i=E("input",c,"",{type:"checkbox",ariaLabel:"Select "+nm(r)});
i.onclick=e=>{const v=L(),j=v.indexOf(r),k=v.indexOf(last);if(e.shiftKey&&k>=0)
for(const q of v.slice(Math.min(j,k),Math.max(j,k)+1))C(q).checked=i.checked;last=r;up()}}
all.onclick=()=>{for(const r of L())C(r).checked=all.checked;up()}})();
"""

# The tools' own style (the editor's dialog), inserted with them and
# allowed by its hash in the page's style-src.
TOOLS_CSS: Final = (
    "#ed{width:min(60rem,calc(100% - 1rem));color:var(--fg);background:var(--bg);"
    "border:1px solid var(--line);border-radius:8px}#ed h2{font-size:1rem;overflow-wrap:anywhere}"
    "#ed textarea{display:block;width:100%;height:60vh;font:13px/1.4 ui-monospace,monospace}"
    "#ed p{display:flex;flex-wrap:wrap;gap:.5rem}#ed .bad{color:var(--bad)}"
)

# S.tools: zip (download the selection), del (delete it, after a
# confirmation naming what goes), edit (the editor on a row).  In the
# editor, U is the file's URL and tag the ETag it was loaded with; say()
# is the dialog's own status line.  ASCII only (its hash is over the
# exact bytes the listing serves).
TOOLS_SCRIPT: Final = (
    """
(()=>{const d=document,S=self.serverio,E=S.E,M=1048576,A=r=>r.querySelector("td.name a");
E("style",d.head,'"""
    + TOOLS_CSS
    + """');
const zip=async()=>{const s=S.X();let u="?archive=zip";
if(s.length<S.rows().length||d.querySelector("p.notice")||
new URLSearchParams(location.search).get("filter"))
u+=s.map(r=>"&name="+A(r).getAttribute("href").slice(2).replace(/\\/$/,"")).join("");
if(u.length+location.pathname.length>8000)
return S.say("Too many names for one download: select fewer",1);
try{await S.fetch(u,{method:"HEAD"})}
catch(e){return S.say("Cannot download the selection ("+e.message+"): reload the page",1)}
const a=E("a",d.body,"",{href:u,download:""});a.click();a.remove()};
const del=async()=>{const s=S.X().sort((a,b)=>a.matches(".dir")-b.matches(".dir")),n=s.map(S.nm),
f=s.some(r=>r.matches(".dir"))?" (each folder with everything in it)":"";
if(!confirm("Delete "+s.length+(s.length>1?" items: ":" item: ")+n.slice(0,20).join(", ")+
(n.length>20?" and "+(n.length-20)+" more":"")+f+"? This cannot be undone."))return;
let k=0;for(const r of s){try{await S.fetch(A(r).href,{method:"DELETE"})}catch(e){break}
r.remove();k++}
if(k===s.length)S.say("Deleted "+k+(k>1?" items":" item"));S.up()};
const D=E("dialog",d.body,"",{id:"ed"}),H=E("h2",D,"",{id:"ed-h"}),
T=E("textarea",D,"",{spellcheck:false}),Q=E("p",D,"",{id:"ed-s"}),B=E("p",D),
sv=E("button",B,"Save",{type:"button"}),rl=E("button",B,"Reload",{type:"button"}),
cp=E("button",B,"Save as copy\\u2026",{type:"button"}),cl=E("button",B,"Close",{type:"button"});
D.setAttribute("aria-labelledby","ed-h");Q.setAttribute("role","status");let U,N,tag,dirty;
const say=(m,bad)=>{Q.textContent=m;Q.className=bad?"bad":""};
const load=async()=>{say("Loading\\u2026");sv.disabled=true;cp.hidden=true;dirty=0;T.value="";
let r=await fetch(U,{cache:"no-store",headers:{Range:"bytes=0-"+(M-1)}});
if(r.status===416)r=await fetch(U,{cache:"no-store"});
if(!r.ok)return say("Cannot open: "+r.status+" "+r.statusText,1);
if(+(r.headers.get("Content-Range")||"/0").split("/")[1]>M)
return say("Over 1 MiB: too large to edit here",1);
try{T.value=new TextDecoder("utf-8",{fatal:true}).decode(await r.arrayBuffer())}
catch(e){return say("Not UTF-8 text: cannot edit here",1)}
tag=r.headers.get("ETag");sv.disabled=!tag;say(tag?"":"No ETag: cannot save safely",!tag)};
const sure=()=>!dirty||confirm("Discard your changes?");T.oninput=()=>{dirty=1};
rl.onclick=()=>sure()&&load();cl.onclick=()=>sure()&&D.close();
sv.onclick=async()=>{sv.disabled=true;say("Saving\\u2026");
try{const r=await S.fetch(U,{method:"PUT",body:T.value,headers:{"If-Match":tag}});
tag=r.headers.get("ETag");dirty=0;sv.disabled=!tag;say(tag?"Saved":"Saved; reopen to edit again")}
catch(e){if(e.status!==412){sv.disabled=false;return say(e.message,1)}cp.hidden=false;
say("Not saved: the file changed since you opened it. Reload it (your edits are lost), "+
"or save your text as a copy.",1)}};
cp.onclick=async()=>{const n=prompt("Save your text as (a new name in this folder)",
N.replace(/(\\.[^.]*)?$/,m=>" (copy)"+m));if(!n)return;
try{await S.fetch(new URL(encodeURIComponent(n),U).href,{method:"PUT",body:T.value,
headers:{"If-None-Match":"*"}});dirty=0;say("Saved as "+n+" (reload the page to see it)")}
catch(e){say(e.status===412?n+" exists: choose another name":e.message,1)}};
const edit=r=>{U=A(r).href;N=A(r).textContent;H.textContent="Edit "+N;
T.setAttribute("aria-label","Contents of "+N);D.showModal();T.focus();load()};
S.tools={zip,del,edit}})();
"""
)


# The CSP hash-sources that allow them (their exact texts).
SELECT_SOURCE: Final = sha256_source(SELECT_SCRIPT)
TOOLS_SOURCE: Final = sha256_source(TOOLS_SCRIPT)
TOOLS_STYLE_SOURCE: Final = sha256_source(TOOLS_CSS)
# The tools as the listing serves them (?asset=tools).
TOOLS_ASSET: Final = TOOLS_SCRIPT.encode("ascii")
