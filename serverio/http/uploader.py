"""The listing page's uploader: serverio's own resumable-upload client (pure).

A constant script (:data:`UPLOADER_SCRIPT`), allowed by its hash under
the listing's Content-Security-Policy (CSP Level 3 §8.4) like the page's
other scripts; no name, path or header ever reaches its text.  It
enhances the upload form (``form.files``) of a writable folder: without
script the form's multipart ``POST`` works as before.

What it does (docs/reference/resumable-uploads.md, "From the page"):

* each chosen or dropped file is its own resumable upload of the IETF
  draft: a ``PUT`` to the target path with ``Upload-Complete: ?0``,
  ``Upload-Length`` and ``If-None-Match: *`` (an existing name is not
  replaced: 412, shown on the file's row), then ``PATCH`` requests
  (``application/partial-upload``) to the upload resource the ``201``'s
  ``Location`` names, each part at most ``max-append-size`` of the
  answer's ``Upload-Limit`` (``--upload-chunk-size``), the last with
  ``Upload-Complete: ?1``; a ``409`` continues at the offset it sends;
* at most :data:`PARALLEL` files at once, a progress bar per file and one
  for all; pause and resume (per file and for all); cancel (``DELETE``);
* a dropped connection is retried (``HEAD`` for the offset, then the
  rest), backing off to 15 seconds between tries;
* the upload URLs are kept in ``localStorage`` (key ``serverio-uploads``)
  with the file's identity (target path, size, last-modified time): after
  a reload the page lists the interrupted uploads, and choosing or
  dropping the same file again continues at ``HEAD``'s offset;
* a folder dropped (``DataTransferItem.webkitGetAsEntry``, directories
  walked) or chosen with the folder picker (``webkitdirectory``) is
  uploaded with its subfolders, each made first with the form's
  new-folder ``POST`` (``mkdir``; one that exists already is fine);
* ``beforeunload`` asks before leaving while an upload is running;
* when every file of the page is in, the page reloads to list them.

The script needs ``connect-src 'self'`` (its requests go to this origin
only); :data:`UPLOADER_SOURCE` is its CSP hash-source.
"""

from __future__ import annotations

import re
from typing import Final

from .hashsource import sha256_source

__all__ = ["PARALLEL", "UPLOADER_SCRIPT", "UPLOADER_SOURCE"]

# Files uploaded at once (each its own chain of requests); the rest wait.
PARALLEL: Final = 3

# The source, with its comments; sent without them (the page's weight).
_SOURCE: Final = (
    """
(()=>{"use strict";const d=document,form=d.querySelector("form.files");
if(!form||!self.fetch||!self.XMLHttpRequest)return;
const sec=form.parentNode,pick=form.querySelector("input[type=file]"),base=location.pathname;
const KEY="serverio-uploads",PAR=@PARALLEL@,CHUNK=52428800,tasks=[],made=new Map();let active=0;
const el=(t,p,x)=>{const e=d.createElement(t);if(x!=null)e.textContent=x;if(p)p.append(e);return e};
const hs=n=>{if(n<1024)return n+" B";let v=n;for(const u of["KiB","MiB","GiB","TiB"]){v/=1024;
if(v<1024||u==="TiB")return v.toFixed(1)+" "+u}};
const load=()=>{try{const s=JSON.parse(localStorage.getItem(KEY)||"{}");
return s&&typeof s==="object"?s:{}}catch(e){return{}}};
const keep=(k,v)=>{const s=load();if(v)s[k]=v;else delete s[k];
try{localStorage.setItem(KEY,JSON.stringify(s))}catch(e){}};
const enc=p=>p.split("/").map(encodeURIComponent).join("/");
const ours=u=>typeof u==="string"&&u.startsWith(location.origin+"/.serverio/uploads/");
const bad=r=>r.split("/").some(s=>s===""||s==="."||s==="..");
const why=async r=>{let m=r.status+" "+r.statusText;try{const p=JSON.parse(await r.text());
m=p.detail||p.title||m}catch(e){}return m};
const limit=(h,t)=>{const m=/max-append-size=(\\d+)/.exec(h||"");if(m&&+m[1]>0)t.chunk=+m[1]};
/* The panel: the total, then one row per file. */
const box=el("div");box.className="uploads";box.hidden=true;sec.after(box);
const head=el("p",box),all=el("progress",head),sum=el("span",head," "),
pa=el("button",head,"Pause all"),ra=el("button",head,"Resume all");
all.max=1;all.value=0;all.setAttribute("aria-label","All uploads");pa.type=ra.type="button";
const list=el("ul",box);list.style.listStyle="none";list.style.padding="0";
const lost=el("ul",box);lost.style.listStyle="none";lost.style.padding="0";
const total=()=>{let s=0,n=0,left=0;for(const t of tasks){s+=t.size;n+=t.off+t.sent;
if(t.st!=="done")left++}all.max=s||1;all.value=n;
sum.textContent=" "+hs(n)+" of "+hs(s)+" \\u00b7 "+left+" of "+tasks.length+" left"};
const show=t=>{t.bar.max=t.size||1;t.bar.value=t.off+t.sent;
const pc=t.size?Math.floor(100*(t.off+t.sent)/t.size):100;
t.info.textContent={done:" done",paused:" paused at "+pc+"%",failed:" failed: "+t.err,
retry:" connection lost, retrying\\u2026"}[t.st]||" "+hs(t.off+t.sent)+" of "+hs(t.size)+
" \\u00b7 "+pc+"%";t.pb.textContent=t.st==="paused"||t.st==="failed"?"Resume":"Pause";
t.pb.hidden=t.cb.hidden=t.st==="done";t.row.dataset.state=t.st;total()};
/* Folders: made with the form's new-folder POST, parents first. */
const mkdir=rel=>{if(!rel)return Promise.resolve();let p=made.get(rel);if(p)return p;
const i=rel.lastIndexOf("/"),up=i<0?"":rel.slice(0,i),name=rel.slice(i+1);
p=mkdir(up).then(async()=>{const f=new FormData();f.append("mkdir",name);
const r=await fetch(base+(up?enc(up)+"/":""),{method:"POST",body:f,redirect:"manual",
headers:{Accept:"application/json"}});
if(r.type!=="opaqueredirect"&&!r.ok&&r.status!==409)throw new Error("folder "+rel+": "+
await why(r))});made.set(rel,p);p.catch(()=>made.delete(rel));return p};
const offset=async t=>{const r=await fetch(t.url,{method:"HEAD",cache:"no-store"});
if(r.status===404||r.status===410)return false;if(!r.ok)throw new Error(await why(r));
limit(r.headers.get("Upload-Limit"),t);t.off=+r.headers.get("Upload-Offset")||0;return true};
const create=async t=>{const r=await fetch(t.target,{method:"PUT",body:"",headers:{
"Upload-Complete":t.size?"?0":"?1","Upload-Length":String(t.size),"If-None-Match":"*"}});
if(r.status===412)throw Object.assign(new Error("a file of this name exists"),{fatal:1});
if(!r.ok)throw Object.assign(new Error(await why(r)),{fatal:r.status<500});
if(r.headers.get("Upload-Complete")==="?1"){t.st="done";return}
t.url=new URL(r.headers.get("Location"),location.href).href;limit(r.headers.get("Upload-Limit"),t);
t.off=+r.headers.get("Upload-Offset")||0;
keep(t.key,{u:t.url,p:t.target,n:t.rel,s:t.size,m:t.file.lastModified,t:Date.now()})};
/* One part: PATCH by XMLHttpRequest (fetch has no upload progress). */
const part=t=>new Promise((ok,no)=>{const end=Math.min(t.size,t.off+t.chunk),
x=t.xhr=new XMLHttpRequest();x.open("PATCH",t.url);
x.setRequestHeader("Content-Type","application/partial-upload");
x.setRequestHeader("Upload-Offset",String(t.off));
x.setRequestHeader("Upload-Complete",end===t.size?"?1":"?0");
x.upload.onprogress=e=>{t.sent=Math.min(e.loaded,end-t.off);show(t)};
x.onerror=x.ontimeout=()=>no(new Error("connection lost"));x.onabort=()=>no(new Error("paused"));
x.onload=()=>{t.xhr=null;t.sent=0;const o=x.getResponseHeader("Upload-Offset");
if(x.getResponseHeader("Upload-Complete")==="?1"&&x.status<300){t.off=t.size;t.st="done";
return ok()}if(x.status===409&&o!=null){t.off=+o;return ok()}
if(x.status===204){t.off=o==null?end:+o;return ok()}let m=x.status+" "+x.statusText;
try{const p=JSON.parse(x.responseText);m=p.detail||p.title||m}catch(e){}
no(Object.assign(new Error(m),{fatal:x.status>=400&&x.status<500&&x.status!==408}))};
x.send(t.file.slice(t.off,end))});
const sleep=ms=>new Promise(r=>setTimeout(r,ms));
const run=async t=>{let wait=500;while(t.st==="running"||t.st==="retry"){try{
if(t.dir)await mkdir(t.dir);if(t.url&&!(await offset(t))){keep(t.key,null);t.url=null;t.off=0}
if(!t.url)await create(t);if(t.st==="retry")t.st="running";show(t);
while(t.st==="running"&&t.off<t.size){await part(t);wait=500;show(t)}
if(t.st==="running"&&t.off>=t.size)t.st="done";if(t.st==="done")keep(t.key,null);show(t);
return}catch(e){t.sent=0;if(t.st==="paused"){show(t);return}
if(e.fatal){t.st="failed";t.err=e.message;show(t);return}
t.st="retry";show(t);await sleep(wait);wait=Math.min(wait*2,15000)}}};
const pump=()=>{while(active<PAR){const t=tasks.find(t=>t.st==="queued");if(!t)break;
active++;t.st="running";show(t);run(t).finally(()=>{active--;pump();finished()})}};
const finished=()=>{if(tasks.length&&tasks.every(t=>t.st==="done")){sum.textContent+=
" \\u00b7 all done";setTimeout(()=>location.reload(),800)}};
const toggle=t=>{if(t.bad)return;
if(t.st==="paused"||t.st==="failed"){t.st="queued";t.err="";show(t);pump()}
else if(t.st!=="done"){t.st="paused";if(t.xhr)t.xhr.abort();show(t)}};
pa.addEventListener("click",()=>{for(const t of tasks)if(t.st!=="done"&&t.st!=="failed"&&
t.st!=="paused")toggle(t)});
ra.addEventListener("click",()=>{for(const t of tasks)if(t.st==="paused")toggle(t)});
const cancel=t=>{const was=t.st;t.st="paused";if(t.xhr)t.xhr.abort();
if(t.url)fetch(t.url,{method:"DELETE"}).catch(()=>{});keep(t.key,null);t.row.remove();
tasks.splice(tasks.indexOf(t),1);total();if(was!=="done")pump()};
/* Interrupted uploads of this folder, from an earlier visit. */
const pending=()=>{lost.replaceChildren();const s=load();for(const[k,v]of Object.entries(s)){
if(!v||!ours(v.u)||typeof v.p!=="string"||!v.p.startsWith(base)||tasks.some(t=>t.key===k))
continue;
box.hidden=false;const li=el("li",lost,"Interrupted: "+v.n+" ("+hs(+v.s||0)+
") \\u2014 choose or drop this file again to continue ");li.dataset.key=k;
const b=el("button",li,"Discard");b.type="button";b.addEventListener("click",()=>{
fetch(v.u,{method:"DELETE"}).catch(()=>{});keep(k,null);li.remove()})}};
const add=items=>{box.hidden=false;const s=load();for(const[file,rel]of items){
const target=base+enc(rel),key=target+"\\n"+file.size+"\\n"+file.lastModified;
if(tasks.some(t=>t.key===key&&t.st!=="done"))continue;const old=s[key];const t={file,rel,target,key,
size:file.size,off:0,sent:0,chunk:CHUNK,st:"queued",err:"",xhr:null,
url:old&&ours(old.u)?old.u:null,
dir:rel.includes("/")?rel.slice(0,rel.lastIndexOf("/")):""};
t.row=el("li",list);el("span",t.row,rel+" ");t.bar=el("progress",t.row);
t.bar.setAttribute("aria-label","Upload of "+rel);t.info=el("span",t.row);
t.pb=el("button",t.row);t.cb=el("button",t.row,"Cancel");t.pb.type=t.cb.type="button";
t.pb.addEventListener("click",()=>toggle(t));t.cb.addEventListener("click",()=>cancel(t));
if(bad(rel)){t.st="failed";t.err="not a safe name";t.bad=1}tasks.push(t);show(t)}
pending();pump()};
form.addEventListener("submit",e=>{e.preventDefault();
add([...pick.files].map(f=>[f,f.name]));pick.value=""});
/* The folder picker: webkitdirectory gives each file its relative path. */
const fl=el("input");fl.type="file";fl.multiple=true;fl.webkitdirectory=true;fl.hidden=true;
fl.setAttribute("aria-label","Folder to upload");const fb=el("button",null,"Upload folder");
fb.type="button";form.after(fb,fl);fb.addEventListener("click",()=>fl.click());
fl.addEventListener("change",()=>{add([...fl.files].map(f=>[f,f.webkitRelativePath||f.name]));
fl.value=""});
/* Drops: files and folders (webkitGetAsEntry, directories walked). */
const walk=async(en,pre,out,dirs)=>{if(en.isFile){out.push([await new Promise((a,b)=>
en.file(a,b)),pre+en.name])}else if(en.isDirectory){const p=pre+en.name;dirs.push(p);
const r=en.createReader();for(;;){const b=await new Promise((a,c)=>r.readEntries(a,c));
if(!b.length)break;for(const x of b)await walk(x,p+"/",out,dirs)}}};
const on=e=>{e.preventDefault();d.body.classList.add("dropping")};
d.addEventListener("dragenter",on);d.addEventListener("dragover",on);
d.addEventListener("dragleave",e=>{if(!e.relatedTarget)d.body.classList.remove("dropping")});
d.addEventListener("drop",async e=>{e.preventDefault();d.body.classList.remove("dropping");
const dt=e.dataTransfer;if(!dt)return;const ens=[...(dt.items||[])].map(i=>
i.webkitGetAsEntry&&i.webkitGetAsEntry()).filter(Boolean);
if(!ens.length){add([...(dt.files||[])].map(f=>[f,f.name]));return}
const out=[],dirs=[];for(const en of ens)await walk(en,"",out,dirs);
for(const p of dirs)mkdir(p).catch(()=>{});add(out)});
addEventListener("beforeunload",e=>{if(tasks.some(t=>t.st==="running"||t.st==="retry"||
t.st==="queued")){e.preventDefault();e.returnValue=""}});
pending()})();
"""
).replace("@PARALLEL@", str(PARALLEL))
UPLOADER_SCRIPT: Final = re.sub(r"/\*.*?\*/\n?", "", _SOURCE)


# The CSP hash-source that allows the script (its exact text).
UPLOADER_SOURCE: Final = sha256_source(UPLOADER_SCRIPT)
