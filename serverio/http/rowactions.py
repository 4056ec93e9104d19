"""The listing page's per-row actions: rename, move, delete, download,
share (pure).

A constant script (:data:`ACTIONS_SCRIPT`), allowed by its hash
(:data:`ACTIONS_SOURCE`) under the listing's Content-Security-Policy (CSP
Level 3 §8.4) like the page's other scripts; no name, path or header ever
reaches its text.  The page sends it only when the reader may delete at
least one of the listed names, or make share links of them (the access
hook's answers, :class:`serverio.http.listing.PageRights`); which rows
it serves is read from the page: the table's ``data-may`` tokens (the
folder's rights), or a row's own ``data-may`` where its delete right
differs.

What it does (docs/reference/page-actions.md):

* a column of "Actions for NAME" buttons, one per row with an action,
  each opening one shared modal ``<dialog>`` (focus kept in it, Escape
  closes) with the name, a ``download`` link (files), and with the delete
  right a rename field, a move field (a folder path of this site, checked
  by its ``pattern``; the folders of this page are offered) and Delete,
  with the share right "Share link";
* rename and move are one ``MOVE`` (RFC 4918 §9.9) with ``Destination``
  (an absolute path) and ``Overwrite: F`` (an existing name is never
  replaced: 412), delete is ``DELETE`` after a confirmation naming what
  goes (a folder "and everything in it"), a share link is the login
  feature's ``POST /.serverio/share`` (with the CSRF token
  ``/.serverio/whoami`` gives a session); the requests go through
  ``self.serverio.fetch``, so a refusal's ``application/problem+json``
  detail is the status line;
* the Delete key on a focused row asks the same confirmation (the arrow
  keys and Enter are the page's script's).

It uses the page script's ``self.serverio`` (``say``, ``fetch``,
``rows``) and needs ``connect-src 'self'``.
"""

from __future__ import annotations

from typing import Final

from .hashsource import sha256_source

__all__ = ["ACTIONS_CSS", "ACTIONS_SCRIPT", "ACTIONS_SOURCE"]

# Its part of the page's style (appended to serverio.http.pageassets.STYLE).
ACTIONS_CSS: Final = """\
td.act{padding:0}td.act button{min-height:1.75rem;padding:0 .5rem}
dialog{border:1px solid var(--line);border-radius:8px;\
width:26rem}dialog h2{font-size:1rem;margin-top:0;\
overflow-wrap:anywhere}dialog form,dialog p{display:flex;flex-wrap:wrap;gap:.5rem;\
margin:0 0 .75rem;align-items:end}
dialog label{display:grid;flex:1 1 12rem}#status{overflow-wrap:anywhere}
"""

# E: make an element; ok(r): may the reader delete row r; seg(r): its
# name's encoded segment (exact bytes, from the server's href); go: one
# request, the status line says how it went.
_SOURCE: Final = """
(()=>{const d=document,S=self.serverio,T=d.querySelector("table[data-may]");if(!S||!T)return;
const E=(t,p,x,a)=>{const e=Object.assign(d.createElement(t),a);if(x)e.textContent=x;
p.append(e);return e},A=r=>r.querySelector("td.name a"),
ok=r=>/delete/.test(r.dataset.may??T.dataset.may),
dir=r=>r.matches(".dir"),nm=r=>A(r).textContent.replace(/\\/$/,""),
go=async(r,m,h,t)=>{try{await S.fetch(A(r).href,{method:m,headers:h});S.say(t);return 1}
catch{}},mv=(r,u,t)=>go(r,"MOVE",{Destination:u+(dir(r)?"/":""),Overwrite:"F"},t),
del=async r=>{const n=nm(r);confirm("Delete \u201c"+n+"\u201d"+(dir(r)?" and everything in it":
"")+"? This cannot be undone.")&&await go(r,"DELETE",{},"Deleted "+n)&&r.remove()};let R,h="/";
try{h=decodeURIComponent(location.pathname)}catch{}
const D=E("dialog",d.body),H=E("h2",D),
G=E("a",E("p",D),"Download",{download:""}),L=E("datalist",D,"",{id:"act-f"}),
F=(x,b,p)=>{const f=E("form",D,"",{method:"dialog"}),
i=E("input",E("label",f,x),"",{required:1,pattern:p});E("button",f,b);return[f,i]},
[rf,ri]=F("New name (no /)","Rename","(?!\\\\.\\\\.?$)[^\\\\/]+"),
[mf,mi]=F("Move to folder","Move","(/(?!\\\\.\\\\.?(/|$))[^\\\\/]+)*/?"),
B=E("p",D),sh=/share/.test(T.dataset.may),
X=E("button",B,"Delete…",{onclick:()=>{D.close();del(R)}});
E("button",B,"Share link",{hidden:!sh,onclick:async()=>{D.close();try{const r=R,
w=await(await fetch("/.serverio/whoami")).json(),j=await(await S.fetch("/.serverio/share",
{method:"POST",body:new URLSearchParams({path:decodeURIComponent(A(r).pathname),
csrf:w.csrf})})).json();S.say("Share link: "+j.url)}catch{}}});
E("button",B,"Cancel",{onclick:()=>D.close()});
mi.setAttribute("list","act-f");
rf.onsubmit=async()=>{const r=R,n=ri.value,a=A(r),s=dir(r)?"/":"";
await mv(r,location.pathname+encodeURIComponent(n),"Renamed to "+n)&&
(a.href="./"+encodeURIComponent(n)+s,a.textContent=n+s)};
mf.onsubmit=async()=>{const r=R,p=mi.value.replace(/\\/?$/,"/");
await mv(r,p.split("/").map(encodeURIComponent).join("/")+
A(r).getAttribute("href").slice(2).replace(/\\/$/,""),"Moved "+nm(r)+" to "+p)&&r.remove()};
E("th",T.tHead.rows[0],"",{className:"act",ariaLabel:"Actions"});
for(const r of T.tBodies[0].rows){const c=E("td",r,"",{className:"act"});
r.matches(".entry")&&(sh||ok(r))&&E("button",c,"⋯",{ariaLabel:"Actions for "+nm(r),
onclick:()=>{R=r;D.ariaLabel=H.textContent=ri.value=nm(r);G.href=A(r).href;G.hidden=dir(r);mi.value=h;
rf.hidden=mf.hidden=X.hidden=!ok(r);L.replaceChildren();
for(const x of S.rows())dir(x)&&x!==r&&E("option",L,"",{value:h+nm(x)+"/"});
h>"/"&&E("option",L,"",{value:h.replace(/[^/]+\\/$/,"")});D.showModal()}})}
d.addEventListener("keydown",e=>{const r=e.key=="Delete"&&d.activeElement.closest("tr.entry");
r&&ok(r)&&(e.preventDefault(),del(r))})})();
"""

# Sent as one line: every line of the source ends where a statement or an
# expression may (never relying on a line break).
ACTIONS_SCRIPT: Final = _SOURCE.replace("\n", "")


# The CSP hash-source that allows the script (its exact text).
ACTIONS_SOURCE: Final = sha256_source(ACTIONS_SCRIPT)
